#include "compression/codec.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "core/rng.h"
#include "core/thread_pool.h"

namespace plexus {
namespace {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

constexpr char kMagic[4] = {'P', 'X', 'C', '1'};
constexpr size_t kHeaderBytes = 4 + 1 + 8;

template <typename T>
void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
T Get(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// Makes `out` `total` bytes long and writes the header at its start; returns where the payload
// starts. A buffer that already has that size (a sender encoding every task) is not written
// before the codec fills it: resizing from empty would first zero it, one more serial pass.
char* SizedHeader(std::string* out, uint8_t id, uint64_t n, size_t total) {
  if (out->size() != total) {
    out->clear();
    out->resize(total);
  }
  char* at = out->data();
  std::memcpy(at, kMagic, 4);
  at[4] = static_cast<char>(id);
  std::memcpy(at + 5, &n, 8);
  return at + kHeaderBytes;
}

// Starts `out` (replacing what it held, keeping its capacity) with the header.
std::string& Header(std::string* out, uint8_t id, uint64_t n) {
  out->assign(kMagic, 4);
  out->push_back(static_cast<char>(id));
  Put<uint64_t>(*out, n);
  return *out;
}

Status CodecError(const std::string& what) { return InvalidArgumentError("compressed update: " + what); }

// Checks the header against the codec and the layout; the payload follows it.
Status CheckHeader(std::string_view bytes, uint8_t id, size_t n) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return CodecError("not a plexus compressed payload");
  }
  if (static_cast<uint8_t>(bytes[4]) != id) {
    return CodecError("encoded with codec " + std::to_string(static_cast<uint8_t>(bytes[4])) + ", expected " +
                      std::to_string(id));
  }
  if (Get<uint64_t>(bytes, 5) != n) {
    return CodecError("holds " + std::to_string(Get<uint64_t>(bytes, 5)) + " values, the model has " +
                      std::to_string(n));
  }
  return Status::Ok();
}

Status CheckLength(std::string_view bytes, size_t payload) {
  if (bytes.size() != kHeaderBytes + payload) {
    return CodecError(std::to_string(bytes.size()) + " bytes where " + std::to_string(kHeaderBytes + payload) +
                      " were expected");
  }
  return Status::Ok();
}

bool FiniteScale(float s) { return std::isfinite(s) && s >= 0.0f; }

// IEEE binary16, round to nearest even; values beyond the largest half (and infinities and NaNs,
// which the encoder does not see) saturate to it. Branch-free, so that the compiler vectorizes
// the loops over it: a subnormal half is |f| rounded to a multiple of 2^-24, which adding 0.5f
// (whose last place is 2^-24) does in the FPU, in the rounding mode (nearest even); a normal half
// is f's bits rebiased (exponent 127 -> 15), rounded at bit 13 by adding 0xfff plus the bit that
// stays last (ties to even), then shifted; rounding may carry into the exponent, as it should.
inline uint16_t ToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t ax = x & 0x7fffffffu;
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(ax) + 0.5f) - 0x3f000000u;
  uint32_t normal = (ax + 0xc8000fffu + ((ax >> 13) & 1u)) >> 13;  // 0xc8000000: (15 - 127) << 23
  normal = normal > 0x7bffu ? 0x7bffu : normal;
  // Both computed, one kept by a mask (a ?: here became a branch, which stops vectorization).
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(ax < 0x38800000u);  // 2^-14: the smallest normal
  return static_cast<uint16_t>(sign | (subnormal & is_subnormal) | (normal & ~is_subnormal));
}

// Branch-free too: a subnormal half is its integer times 2^-24; a normal one is rebiased, and
// infinities and NaNs keep exponent 255 (Decode's finiteness check then refuses them).
inline float FromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t em = h & 0x7fffu;
  const float subnormal = static_cast<float>(static_cast<int32_t>(em)) * 0x1p-24f;
  uint32_t normal = (em << 13) + 0x38000000u;
  normal += (0u - static_cast<uint32_t>(em >= 0x7c00u)) & 0x38000000u;
  const uint32_t is_subnormal = 0u - static_cast<uint32_t>(em < 0x400u);
  return std::bit_cast<float>(sign | (std::bit_cast<uint32_t>(subnormal) & is_subnormal) | (normal & ~is_subnormal));
}

uint16_t ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((r & 0x7f80u) == 0x7f80u) r = (x >> 16 & 0x8000u) | 0x7f7fu;  // saturate instead of infinity
  return static_cast<uint16_t>(r);
}
float FromBf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// The loops that touch every value, as functions of their own so that on x86-64 each also comes
// in an AVX2 build, picked at load time (GCC's target_clones): the baseline x86-64 (SSE2) does 4
// values per instruction, AVX2 8. Elsewhere (aarch64, riscv64) the compiler's own vectors only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PLEXUS_VALUE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define PLEXUS_VALUE_LOOP
#endif

template <uint16_t (*To)(float)>
inline void ToHalves(const float* v, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = To(v[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
// Whether a float's bits are an infinity or a NaN (exponent all ones).
inline uint32_t NotFinite(float f) { return (std::bit_cast<uint32_t>(f) & 0x7f800000u) == 0x7f800000u; }

// Returns whether any value decoded is not finite: checked in the same pass, while the value is
// in a register, instead of in a serial pass over the model afterwards.
template <float (*From)(uint16_t)>
inline bool FromHalves(const char* in, size_t n, float* v) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    const float f = From(h);
    bad |= NotFinite(f);
    v[i] = f;
  }
  return bad != 0;
}
PLEXUS_VALUE_LOOP void ToFp16(const float* v, size_t n, char* out) { ToHalves<ToHalf>(v, n, out); }
PLEXUS_VALUE_LOOP bool FromFp16(const char* in, size_t n, float* v) { return FromHalves<FromHalf>(in, n, v); }
PLEXUS_VALUE_LOOP void ToBf16s(const float* v, size_t n, char* out) { ToHalves<ToBf16>(v, n, out); }
PLEXUS_VALUE_LOOP bool FromBf16s(const char* in, size_t n, float* v) { return FromHalves<FromBf16>(in, n, v); }
PLEXUS_VALUE_LOOP bool CopyFloats(const char* in, size_t n, float* v) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);
    bad |= NotFinite(f);
    v[i] = f;
  }
  return bad != 0;
}

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

// Runs fn(begin, end) over [0, n) on the pool's threads in ranges of at least `min_range` (one
// range, on this thread, without a pool or for small n).
void ForRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<void(size_t, size_t)>& fn) {
  if (pool != nullptr && pool->size() > 1 && n >= 2 * min_range) {
    pool->ParallelFor(n, fn, min_range);
  } else if (n > 0) {
    fn(0, n);
  }
}
constexpr size_t kMinParallelValues = size_t{1} << 16;

// The decoded delta, checked finite: `all_finite` says the decoding loops saw only finite
// values (CheckFinite then runs only to name the first bad one).
Result<ModelState> Finished(ModelState out, bool all_finite) {
  if (all_finite) {
    out.MarkCheckedFinite();
    return out;
  }
  PLEXUS_RETURN_IF_ERROR(out.CheckFinite().WithContext("compressed update"));
  return out;
}
Result<ModelState> Finished(ModelState out) { return Finished(std::move(out), false); }

// Runs fn(begin, end) -> "saw a non-finite value" over ranges as ForRanges does; true when no
// range saw one.
bool AllFiniteOverRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<bool(size_t, size_t)>& fn) {
  std::atomic<bool> bad{false};
  ForRanges(pool, n, min_range, [&](size_t begin, size_t end) {
    if (fn(begin, end)) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

class F32Codec final : public Codec {
 public:
  explicit F32Codec(ThreadPool* pool) : pool_(pool) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    char* to = SizedHeader(result, 0, d.num_params(), EncodedSize(d));
    const char* from = reinterpret_cast<const char*>(d.data().data());
    ForRanges(pool_, d.num_params(), kMinParallelValues,
              [&](size_t begin, size_t end) { std::memcpy(to + 4 * begin, from + 4 * begin, 4 * (end - begin)); });
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 0, layout.num_params()));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, layout.num_bytes()));
    ModelState out = ModelState::UninitializedLike(layout);
    const char* from = b.data() + kHeaderBytes;
    float* v = out.data().data();
    const bool finite = AllFiniteOverRanges(
        pool_, layout.num_params(), kMinParallelValues,
        [&](size_t begin, size_t end) { return CopyFloats(from + 4 * begin, end - begin, v + begin); });
    return Finished(std::move(out), finite);
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + l.num_bytes(); }
  std::string Describe() const override { return "f32"; }
  bool keeps_every_value() const override { return true; }

 private:
  ThreadPool* const pool_;
};

// Whether any of `n` 16-bit floats is an infinity or a NaN (the exponent bits `exponent` all
// ones): what decoding them would find, without decoding.
PLEXUS_VALUE_LOOP bool AnyHalfNotFinite(const char* in, size_t n, uint16_t exponent) {
  uint32_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    bad |= static_cast<uint32_t>((h & exponent) == exponent);
  }
  return bad != 0;
}

// s[i] (+)= w x v[i], widened.
PLEXUS_VALUE_LOOP void AddWidened(double* s, const float* v, size_t n, double w, bool first) {
  if (first) {
    for (size_t i = 0; i < n; ++i) s[i] = w * static_cast<double>(v[i]);
  } else {
    for (size_t i = 0; i < n; ++i) s[i] += w * static_cast<double>(v[i]);
  }
}

// An fp16 or bf16 delta read from checked bytes: folded without a float32 copy of the update,
// its halves widened block by block into a buffer that stays in L1.
template <bool (*From)(const char*, size_t, float*)>
class CodedHalves final : public CodedDelta {
 public:
  CodedHalves(std::string codec, std::string bytes, size_t n)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), n_(n) {}
  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return n_; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override {
    ForBlocks(begin, end, [&](const float* v, size_t at, size_t len) { AddWidened(sum + at, v, len, w, first); });
  }
  double SquaredNorm() const override {
    double total = 0.0;
    ForBlocks(0, n_, [&](const float* v, size_t, size_t len) {
      for (size_t i = 0; i < len; ++i) total += static_cast<double>(v[i]) * static_cast<double>(v[i]);
    });
    return total;
  }
  ModelState Materialize(const ModelState& layout) const override {
    ModelState out = ModelState::UninitializedLike(layout);
    From(bytes_.data() + kHeaderBytes, n_, out.data().data());
    out.MarkCheckedFinite();
    return out;
  }

 private:
  // fn(values, first index, count) over [begin, end) in blocks of 2048 decoded values.
  template <typename Fn>
  void ForBlocks(size_t begin, size_t end, Fn&& fn) const {
    constexpr size_t kBlock = 2048;
    float block[kBlock];
    for (size_t b = begin; b < end; b += kBlock) {
      const size_t len = std::min(kBlock, end - b);
      From(bytes_.data() + kHeaderBytes + 2 * b, len, block);  // finite: Read checked every value
      fn(block, b, len);
    }
  }
  const std::string codec_, bytes_;
  const size_t n_;
};

// kExponent: the bits that are all ones in an infinity or a NaN of this format.
template <void (*To)(const float*, size_t, char*), bool (*From)(const char*, size_t, float*), uint8_t kId,
          uint16_t kExponent>
class Half final : public Codec {
 public:
  Half(const char* name, ThreadPool* pool) : name_(name), pool_(pool) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    char* to = SizedHeader(result, kId, d.num_params(), EncodedSize(d));
    const float* v = d.data().data();
    ForRanges(pool_, d.num_params(), kMinParallelValues,
              [&](size_t begin, size_t end) { To(v + begin, end - begin, to + 2 * begin); });
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, kId, layout.num_params()));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 2 * layout.num_params()));
    ModelState out = ModelState::UninitializedLike(layout);
    const char* from = b.data() + kHeaderBytes;
    float* v = out.data().data();
    const bool finite = AllFiniteOverRanges(pool_, out.num_params(), kMinParallelValues, [&](size_t begin, size_t end) {
      return From(from + 2 * begin, end - begin, v + begin);
    });
    return Finished(std::move(out), finite);
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + 2 * l.num_params(); }
  std::string Describe() const override { return name_; }
  bool keeps_every_value() const override { return true; }
  bool has_coded_form() const override { return true; }
  Result<std::shared_ptr<const CodedDelta>> Read(std::string b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, kId, layout.num_params()));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 2 * layout.num_params()));
    const char* halves = b.data() + kHeaderBytes;
    if (!AllFiniteOverRanges(pool_, layout.num_params(), kMinParallelValues, [&](size_t begin, size_t end) {
          return AnyHalfNotFinite(halves + 2 * begin, end - begin, kExponent);
        })) {
      return CodecError(std::string(name_) + " value that is not finite");
    }
    return std::shared_ptr<const CodedDelta>(
        std::make_shared<CodedHalves<From>>(spec(), std::move(b), layout.num_params()));
  }

 private:
  const char* name_;
  ThreadPool* const pool_;
};

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

// top-k's bytes for `n` values checked: header, count, length, every index in range and above
// the one before it, every value finite.
Status CheckTopK(std::string_view b, size_t n) {
  PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 4, n));
  if (b.size() < kHeaderBytes + 8) return CodecError("top-k payload without its count");
  const uint64_t k = Get<uint64_t>(b, kHeaderBytes);
  if (k > n) return CodecError("top-k count " + std::to_string(k) + " exceeds the " + std::to_string(n) + " values");
  PLEXUS_RETURN_IF_ERROR(CheckLength(b, 8 + 8 * k));
  size_t at = kHeaderBytes + 8;
  int64_t previous = -1;
  for (uint64_t j = 0; j < k; ++j, at += 8) {
    const uint32_t i = Get<uint32_t>(b, at);
    if (i >= n || static_cast<int64_t>(i) <= previous) {
      return CodecError("top-k index " + std::to_string(i) + " out of range or out of order");
    }
    previous = i;
    if (!std::isfinite(Get<float>(b, at + 4))) {
      return CodecError("top-k value at index " + std::to_string(i) + " is not finite");
    }
  }
  return Status::Ok();
}

// v[i] = value for every (i, value) pair of checked top-k bytes.
void ScatterTopK(std::string_view b, float* v) {
  const uint64_t k = Get<uint64_t>(b, kHeaderBytes);
  for (size_t at = kHeaderBytes + 8, end = at + 8 * k; at < end; at += 8)
    v[Get<uint32_t>(b, at)] = Get<float>(b, at + 4);
}

// A top-k delta read from checked bytes: (index, value) pairs in index order, zero elsewhere.
class CodedTopK final : public CodedDelta {
 public:
  CodedTopK(std::string codec, std::string bytes, size_t n)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), n_(n), k_(Get<uint64_t>(bytes_, kHeaderBytes)) {}
  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return n_; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override {
    if (first) std::fill(sum + begin, sum + end, 0.0);
    // The first pair at or after `begin`: indices ascend.
    size_t lo = 0, hi = k_;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Index(mid) < begin)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (size_t j = lo; j < k_ && Index(j) < end; ++j) sum[Index(j)] += w * static_cast<double>(Value(j));
  }
  double SquaredNorm() const override {
    double total = 0.0;
    for (size_t j = 0; j < k_; ++j) total += static_cast<double>(Value(j)) * static_cast<double>(Value(j));
    return total;
  }
  ModelState Materialize(const ModelState& layout) const override {
    ModelState out = ModelState::ZerosLike(layout);
    ScatterTopK(bytes_, out.data().data());
    out.MarkCheckedFinite();
    return out;
  }

 private:
  size_t Index(size_t j) const { return Get<uint32_t>(bytes_, kHeaderBytes + 8 + 8 * j); }
  float Value(size_t j) const { return Get<float>(bytes_, kHeaderBytes + 12 + 8 * j); }

  const std::string codec_, bytes_;
  const size_t n_;
  const uint64_t k_;
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

class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(double ratio) : ratio_(ratio) {}
  void EncodeTo(const ModelState& d, ModelState* residual, uint64_t, std::string* result) const override {
    std::span<const float> delta = d.data();
    const size_t n = delta.size();
    std::vector<float> v(delta.begin(), delta.end());
    const bool feedback = residual && residual->num_params() == n;
    if (feedback) {
      std::span<const float> r = std::as_const(*residual).data();
      for (size_t i = 0; i < n; ++i) v[i] += r[i];
    }
    const size_t k = K(n);
    std::vector<uint32_t> idx(n);
    std::iota(idx.begin(), idx.end(), 0u);
    // The k largest magnitudes (ties: the lower index), then in index order.
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k - 1), idx.end(),
                     [&](uint32_t a, uint32_t b) {
                       return std::abs(v[a]) != std::abs(v[b]) ? std::abs(v[a]) > std::abs(v[b]) : a < b;
                     });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    std::string& out = Header(result, 4, n);
    out.reserve(EncodedSize(d));
    Put<uint64_t>(out, k);
    for (uint32_t i : idx) {
      Put<uint32_t>(out, i);
      Put<float>(out, v[i]);
    }
    if (feedback) {  // what was not sent waits for the next delta
      for (uint32_t i : idx) v[i] = 0.0f;
      std::copy(v.begin(), v.end(), residual->data().begin());
    }
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckTopK(b, layout.num_params()));
    ModelState out = ModelState::ZerosLike(layout);
    ScatterTopK(b, out.data().data());
    out.MarkCheckedFinite();
    return out;
  }
  bool has_coded_form() const override { return true; }
  Result<std::shared_ptr<const CodedDelta>> Read(std::string b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckTopK(b, layout.num_params()));
    return std::shared_ptr<const CodedDelta>(std::make_shared<CodedTopK>(spec(), std::move(b), layout.num_params()));
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + 8 + 8 * K(l.num_params()); }
  std::string Describe() const override { return "topk(ratio=" + std::to_string(ratio_) + ")"; }
  bool uses_residual() const override { return true; }

 private:
  size_t K(size_t n) const {
    return std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio_ * static_cast<double>(n))), 1,
                              std::max<size_t>(n, 1));
  }
  const double ratio_;
};

class TernGradCodec final : public Codec {
 public:
  void EncodeTo(const ModelState& d, ModelState*, uint64_t seed, std::string* result) const override {
    Rng rng(seed);
    std::string& out = Header(result, 5, d.num_params());
    out.reserve(EncodedSize(d));
    std::vector<uint8_t> codes((d.num_params() + 3) / 4, 0);
    size_t pos = 0;
    for (size_t t = 0; t < d.tensors().size(); ++t) {
      std::span<const float> v = d.tensor(t);
      float s = 0.0f;
      for (float x : v) s = std::max(s, std::abs(x));
      Put<float>(out, s);
      for (float x : v) {
        const bool keep = s > 0 && rng.Uniform() < std::abs(x) / s;
        const uint8_t code = !keep ? 0 : (x > 0 ? 1 : 2);
        codes[pos / 4] |= static_cast<uint8_t>(code << (2 * (pos % 4)));
        ++pos;
      }
    }
    out.append(reinterpret_cast<const char*>(codes.data()), codes.size());
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 5, layout.num_params()));
    const size_t tensors = layout.tensors().size(), n = layout.num_params();
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 4 * tensors + (n + 3) / 4));
    ModelState out = ModelState::UninitializedLike(layout);
    const size_t codes = kHeaderBytes + 4 * tensors;
    size_t pos = 0;
    for (size_t t = 0; t < tensors; ++t) {
      const float s = Get<float>(b, kHeaderBytes + 4 * t);
      if (!FiniteScale(s)) return CodecError("terngrad scale of tensor " + layout.tensors()[t].name + " not finite");
      for (float& x : out.tensor(t)) {
        const uint8_t code = (static_cast<uint8_t>(b[codes + pos / 4]) >> (2 * (pos % 4))) & 3u;
        if (code == 3) return CodecError("terngrad code 3 at value " + std::to_string(pos));
        x = code == 0 ? 0.0f : (code == 1 ? s : -s);
        ++pos;
      }
    }
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override {
    return kHeaderBytes + 4 * l.tensors().size() + (l.num_params() + 3) / 4;
  }
  std::string Describe() const override { return "terngrad"; }
};

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(uint8_t levels) : levels_(levels) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t seed, std::string* result) const override {
    Rng rng(seed);
    std::string& out = Header(result, 6, d.num_params());
    out.reserve(EncodedSize(d));
    out.push_back(static_cast<char>(levels_));
    std::string values;
    for (size_t t = 0; t < d.tensors().size(); ++t) {
      std::span<const float> v = d.tensor(t);
      double sq = 0.0;
      for (float x : v) sq += static_cast<double>(x) * x;
      const auto norm = static_cast<float>(std::sqrt(sq));
      Put<float>(out, norm);
      for (float x : v) {
        const double r = norm > 0 ? std::abs(x) / norm * levels_ : 0.0;
        auto level = static_cast<uint32_t>(std::floor(r));
        if (rng.Uniform() < r - std::floor(r)) ++level;
        level = std::min<uint32_t>(level, levels_);
        values.push_back(static_cast<char>((x < 0 ? 0x80u : 0u) | level));
      }
    }
    out += values;
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 6, layout.num_params()));
    const size_t tensors = layout.tensors().size(), n = layout.num_params();
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 1 + 4 * tensors + n));
    const auto levels = static_cast<uint8_t>(b[kHeaderBytes]);
    if (levels == 0 || levels > 127) return CodecError("qsgd levels " + std::to_string(levels));
    ModelState out = ModelState::UninitializedLike(layout);
    size_t at = kHeaderBytes + 1 + 4 * tensors;
    for (size_t t = 0; t < tensors; ++t) {
      const float norm = Get<float>(b, kHeaderBytes + 1 + 4 * t);
      if (!FiniteScale(norm)) return CodecError("qsgd norm of tensor " + layout.tensors()[t].name + " not finite");
      for (float& x : out.tensor(t)) {
        const auto byte = static_cast<uint8_t>(b[at++]);
        const uint8_t level = byte & 0x7fu;
        if (level > levels)
          return CodecError("qsgd level " + std::to_string(level) + " above " + std::to_string(levels));
        x = (byte & 0x80u ? -1.0f : 1.0f) * norm * static_cast<float>(level) / static_cast<float>(levels);
      }
    }
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override {
    return kHeaderBytes + 1 + 4 * l.tensors().size() + l.num_params();
  }
  std::string Describe() const override { return "qsgd(levels=" + std::to_string(levels_) + ")"; }

 private:
  const uint8_t levels_;
};

}  // namespace

Result<std::shared_ptr<const CodedDelta>> Codec::Read(std::string, const ModelState&) const {
  return FailedPreconditionError("codec " + Describe() + " has no coded form: decode its bytes");
}

CodedDeltaReader MakeCodedDeltaReader(ModelState layout) {
  return [layout = std::move(layout)](const std::string& spec,
                                      std::string bytes) -> Result<std::shared_ptr<const CodedDelta>> {
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Codec> codec, MakeCodec(spec));
    return codec->Read(std::move(bytes), layout);
  };
}

std::vector<std::string> CodecNames() { return {"f32", "fp16", "bf16", "int8", "topk", "terngrad", "qsgd"}; }

std::string CodecNameOf(std::string_view spec) { return std::string(spec.substr(0, spec.find(':'))); }

Result<std::unique_ptr<Codec>> MakeCodec(std::string_view text, ThreadPool* pool) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return InvalidArgumentError("--codec: " + parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  const std::string& name = spec.name();
  std::unique_ptr<Codec> codec;
  auto fail = [](const Status& s) { return InvalidArgumentError("--codec: " + s.message()); };
  if (name == "f32") {
    codec = std::make_unique<F32Codec>(pool);
  } else if (name == "fp16") {
    codec = std::make_unique<Half<ToFp16, FromFp16, 1, 0x7c00>>("fp16", pool);
  } else if (name == "bf16") {
    codec = std::make_unique<Half<ToBf16s, FromBf16s, 2, 0x7f80>>("bf16", pool);
  } else if (name == "int8") {
    auto chunk = spec.GetCount("chunk", 4096);
    if (!chunk.ok()) return fail(chunk.status());
    if (*chunk < 1 || *chunk > (int64_t{1} << 30))
      return InvalidArgumentError("--codec: int8:chunk must be in [1, 2^30]");
    codec = std::make_unique<Int8Codec>(static_cast<uint32_t>(*chunk), pool);
  } else if (name == "topk") {
    auto ratio = spec.GetDouble("ratio", 0.01);
    if (!ratio.ok()) return fail(ratio.status());
    if (!(*ratio > 0 && *ratio <= 1)) return InvalidArgumentError("--codec: topk:ratio must be in (0, 1]");
    codec = std::make_unique<TopKCodec>(*ratio);
  } else if (name == "terngrad") {
    codec = std::make_unique<TernGradCodec>();
  } else if (name == "qsgd") {
    auto levels = spec.GetCount("levels", 16);
    if (!levels.ok()) return fail(levels.status());
    if (*levels < 1 || *levels > 127) return InvalidArgumentError("--codec: qsgd:levels must be in [1, 127]");
    codec = std::make_unique<QsgdCodec>(static_cast<uint8_t>(*levels));
  } else {
    return InvalidArgumentError(
        "--codec: unknown codec '" + name +
        "' (known: f32, fp16, bf16, int8[:chunk=C], topk[:ratio=R], terngrad, qsgd[:levels=L])");
  }
  if (Status s = spec.CheckAllUsed(); !s.ok()) return fail(s);
  codec->spec_ = std::string(text);
  return codec;
}

}  // namespace plexus
