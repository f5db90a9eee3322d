// fp16 and bf16: 16-bit floats, round to nearest even (2 bytes per value); read as a CodedDelta.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

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

template <uint16_t (*To)(float)>
inline void ToHalves(const float* v, size_t n, char* out) {
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = To(v[i]);
    std::memcpy(out + 2 * i, &h, 2);
  }
}
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
PLEXUS_VALUE_LOOP void ToFp16Portable(const float* v, size_t n, char* out) { ToHalves<ToHalf>(v, n, out); }
PLEXUS_VALUE_LOOP bool FromFp16Portable(const char* in, size_t n, float* v) { return FromHalves<FromHalf>(in, n, v); }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// x86-64's F16C converts 8 values per instruction, in the rounding the codec uses (nearest even);
// the branch-free integer version above reached a third of memory bandwidth. F16C turns values
// beyond the largest half into infinities, so they are clamped to +-65504 first (which rounds as
// the portable version saturates): the same bits on every machine (tested against the reference).
__attribute__((target("avx2,f16c"))) void ToFp16F16c(const float* v, size_t n, char* out) {
  const __m256 hi = _mm256_set1_ps(65504.0f), lo = _mm256_set1_ps(-65504.0f);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_min_ps(_mm256_max_ps(_mm256_loadu_ps(v + i), lo), hi);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + 2 * i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  ToHalves<ToHalf>(v + i, n - i, out + 2 * i);
}
__attribute__((target("avx2,f16c"))) bool FromFp16F16c(const char* in, size_t n, float* v) {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  __m256i bad = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 f = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 2 * i)));
    const __m256i e = _mm256_and_si256(_mm256_castps_si256(f), exponent);
    bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(e, exponent));
    _mm256_storeu_ps(v + i, f);
  }
  return !_mm256_testz_si256(bad, bad) | FromHalves<FromHalf>(in + 2 * i, n - i, v + i);
}
const bool kHasF16c = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
void ToFp16(const float* v, size_t n, char* out) {
  return kHasF16c ? ToFp16F16c(v, n, out) : ToFp16Portable(v, n, out);
}
bool FromFp16(const char* in, size_t n, float* v) {
  return kHasF16c ? FromFp16F16c(in, n, v) : FromFp16Portable(in, n, v);
}
#else
void ToFp16(const float* v, size_t n, char* out) { ToFp16Portable(v, n, out); }
bool FromFp16(const char* in, size_t n, float* v) { return FromFp16Portable(in, n, v); }
#endif
PLEXUS_VALUE_LOOP void ToBf16s(const float* v, size_t n, char* out) { ToHalves<ToBf16>(v, n, out); }
PLEXUS_VALUE_LOOP bool FromBf16s(const char* in, size_t n, float* v) { return FromHalves<FromBf16>(in, n, v); }
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

}  // namespace

Result<std::unique_ptr<Codec>> MakeFp16Codec(StrategySpec&, ThreadPool* pool) {
  return std::unique_ptr<Codec>(std::make_unique<Half<ToFp16, FromFp16, 1, 0x7c00>>("fp16", pool));
}

Result<std::unique_ptr<Codec>> MakeBf16Codec(StrategySpec&, ThreadPool* pool) {
  return std::unique_ptr<Codec>(std::make_unique<Half<ToBf16s, FromBf16s, 2, 0x7f80>>("bf16", pool));
}

}  // namespace plexus
