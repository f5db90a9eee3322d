// int8[:chunk=C]: per chunk of C values a float32 scale absmax/127 and one int8 per value; read as a
// CodedDelta.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

// One int8 chunk: writes its values to `q` and returns its scale. The loops are written so that
// the compiler vectorizes them: the largest magnitude as the largest of the values' bits without
// their sign (which order like the magnitudes of finite floats), and rounding to nearest even by
// adding and taking away 1.5 x 2^23 (exact for |x| < 2^22; the FPU rounds in its mode, nearest
// even, as lrintf would).
PLEXUS_VALUE_LOOP float ToInt8(const float* v, size_t n, int8_t* q) {
  int32_t max_bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int32_t bits = static_cast<int32_t>(std::bit_cast<uint32_t>(v[i]) & 0x7fffffffu);
    max_bits = bits > max_bits ? bits : max_bits;
  }
  const float scale = std::bit_cast<float>(max_bits) / 127.0f;
  constexpr float kRound = 12582912.0f;  // 1.5 x 2^23
  if (scale >= std::numeric_limits<float>::min()) {
    const float inverse = 1.0f / scale;
    // A normal scale: |v| x inverse is at most 127 x (1 + 3 x 2^-24) (three roundings), which
    // rounds to 127, so no clamp is needed (two instructions less per vector: this loop, not
    // memory, bounds int8's encoding).
    for (size_t i = 0; i < n; ++i) q[i] = static_cast<int8_t>(static_cast<int32_t>((v[i] * inverse + kRound) - kRound));
    return scale;
  }
  if (scale == 0) {  // every value rounds to zero steps
    std::fill(q, q + n, int8_t{0});
    return scale;
  }
  // A subnormal scale: its inverse may overflow to infinity (which turned small negative values
  // into +127), so divide instead; and it is coarse, so v / scale may pass 127: clamp.
  for (size_t i = 0; i < n; ++i) {
    float r = (v[i] / scale + kRound) - kRound;
    r = r > 127.0f ? 127.0f : r;
    r = r < -127.0f ? -127.0f : r;
    q[i] = static_cast<int8_t>(static_cast<int32_t>(r));
  }
  return scale;
}

PLEXUS_VALUE_LOOP void FromInt8(const int8_t* q, size_t n, float scale, float* v) {
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(q[i]);
}

// int8's bytes for `n` values checked (header, chunk size, length, every chunk's scale); returns
// the chunk size. A scale up to FLT_MAX / 127 (what the encoder can give) keeps every value
// finite, so the values need no check of their own.
Result<uint32_t> CheckInt8(std::string_view b, size_t n) {
  PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 3, n));
  if (b.size() < kHeaderBytes + 4) return CodecError("int8 payload without its chunk size");
  const uint32_t chunk = Get<uint32_t>(b, kHeaderBytes);
  if (chunk == 0) return CodecError("int8 chunk size 0");
  const size_t chunks = (n + chunk - 1) / chunk;
  PLEXUS_RETURN_IF_ERROR(CheckLength(b, 4 + 4 * chunks + n));
  for (size_t k = 0; k < chunks; ++k) {
    const float scale = Get<float>(b, kHeaderBytes + 4 + k * (4 + size_t{chunk}));
    if (!FiniteScale(scale) || scale > std::numeric_limits<float>::max() / 127) {
      return CodecError("int8 scale " + std::to_string(scale) + " of chunk at " + std::to_string(k * chunk));
    }
  }
  return chunk;
}

// s[i] (+)= w x (scale x q[i]): the value as FromInt8 decodes it (a float), widened.
PLEXUS_VALUE_LOOP void AddInt8(double* s, const int8_t* q, size_t n, float scale, double w, bool first) {
  if (first) {
    for (size_t i = 0; i < n; ++i) s[i] = w * static_cast<double>(scale * static_cast<float>(q[i]));
  } else {
    for (size_t i = 0; i < n; ++i) s[i] += w * static_cast<double>(scale * static_cast<float>(q[i]));
  }
}

// An int8 delta read from checked bytes: chunk k is its scale (4 bytes), then its values.
class CodedInt8 final : public CodedDelta {
 public:
  CodedInt8(std::string codec, std::string bytes, size_t n, uint32_t chunk)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), n_(n), chunk_(chunk) {}
  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return n_; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override {
    for (size_t k = begin / chunk_; k * size_t{chunk_} < end; ++k) {
      const size_t start = k * size_t{chunk_}, lo = std::max(begin, start), hi = std::min(end, start + chunk_);
      AddInt8(sum + lo, Values(k) + (lo - start), hi - lo, Scale(k), w, first);
    }
  }
  double SquaredNorm() const override {
    double total = 0.0;
    for (size_t k = 0; k * size_t{chunk_} < n_; ++k) {
      const size_t len = std::min<size_t>(chunk_, n_ - k * size_t{chunk_});
      const int8_t* q = Values(k);
      int64_t steps = 0;  // exact: at most 2^30 x 127^2
      for (size_t i = 0; i < len; ++i) steps += int64_t{q[i]} * q[i];
      const double scale = Scale(k);
      total += scale * scale * static_cast<double>(steps);
    }
    return total;
  }
  ModelState Materialize(const ModelState& layout) const override {
    ModelState out = ModelState::UninitializedLike(layout);
    float* v = out.data().data();
    for (size_t k = 0; k * size_t{chunk_} < n_; ++k) {
      const size_t start = k * size_t{chunk_};
      FromInt8(Values(k), std::min<size_t>(chunk_, n_ - start), Scale(k), v + start);
    }
    out.MarkCheckedFinite();
    return out;
  }

 private:
  const char* Chunk(size_t k) const { return bytes_.data() + kHeaderBytes + 4 + k * (4 + size_t{chunk_}); }
  float Scale(size_t k) const {
    float scale;
    std::memcpy(&scale, Chunk(k), 4);
    return scale;
  }
  const int8_t* Values(size_t k) const { return reinterpret_cast<const int8_t*>(Chunk(k) + 4); }

  const std::string codec_, bytes_;
  const size_t n_;
  const uint32_t chunk_;
};

class Int8Codec final : public Codec {
 public:
  Int8Codec(uint32_t chunk, ThreadPool* pool) : chunk_(chunk), pool_(pool) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    std::span<const float> v = d.data();
    char* const payload = SizedHeader(result, 3, v.size(), EncodedSize(d));
    std::memcpy(payload, &chunk_, 4);
    char* const first = payload + 4;  // chunk k: its scale, then its values
    const size_t chunks = (v.size() + chunk_ - 1) / chunk_;
    ForRanges(pool_, chunks, std::max<size_t>(1, kMinParallelValues / chunk_), [&](size_t k_begin, size_t k_end) {
      for (size_t k = k_begin; k < k_end; ++k) {
        const size_t begin = k * chunk_, end = std::min(v.size(), begin + chunk_);
        char* at = first + k * (4 + size_t{chunk_});
        const float scale = ToInt8(v.data() + begin, end - begin, reinterpret_cast<int8_t*>(at + 4));
        std::memcpy(at, &scale, 4);
      }
    });
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_ASSIGN_OR_RETURN(const uint32_t chunk, CheckInt8(b, layout.num_params()));
    const size_t n = layout.num_params(), chunks = (n + chunk - 1) / chunk;
    const char* const first = b.data() + kHeaderBytes + 4;  // chunk k: its scale, then its values
    ModelState out = ModelState::UninitializedLike(layout);
    float* v = out.data().data();
    ForRanges(pool_, chunks, std::max<size_t>(1, kMinParallelValues / chunk), [&](size_t k_begin, size_t k_end) {
      for (size_t k = k_begin; k < k_end; ++k) {
        const size_t begin = k * chunk, end = std::min(n, begin + chunk);
        const char* at = first + k * (4 + size_t{chunk});
        float scale;
        std::memcpy(&scale, at, 4);
        FromInt8(reinterpret_cast<const int8_t*>(at + 4), end - begin, scale, v + begin);
      }
    });
    return Finished(std::move(out), true);
  }
  size_t EncodedSize(const ModelState& l) const override {
    return kHeaderBytes + 4 + 4 * ((l.num_params() + chunk_ - 1) / chunk_) + l.num_params();
  }
  std::string Describe() const override { return "int8(chunk=" + std::to_string(chunk_) + ")"; }
  bool keeps_every_value() const override { return true; }
  bool has_coded_form() const override { return true; }
  Result<std::shared_ptr<const CodedDelta>> Read(std::string b, const ModelState& layout) const override {
    PLEXUS_ASSIGN_OR_RETURN(const uint32_t chunk, CheckInt8(b, layout.num_params()));
    return std::shared_ptr<const CodedDelta>(
        std::make_shared<CodedInt8>(spec(), std::move(b), layout.num_params(), chunk));
  }

 private:
  const uint32_t chunk_;
  ThreadPool* const pool_;
};

}  // namespace

Result<std::unique_ptr<Codec>> MakeInt8Codec(StrategySpec& spec, ThreadPool* pool) {
  PLEXUS_ASSIGN_OR_RETURN(const int64_t chunk, spec.GetCount("chunk", 4096));
  if (chunk < 1 || chunk > (int64_t{1} << 30)) return InvalidArgumentError("int8:chunk must be in [1, 2^30]");
  return std::unique_ptr<Codec>(std::make_unique<Int8Codec>(static_cast<uint32_t>(chunk), pool));
}

}  // namespace plexus
