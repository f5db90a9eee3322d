#include "core/model_state.h"

#include <openssl/evp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <memory>
#include <set>
#include <string_view>

#if defined(__SSE2__)
#include <emmintrin.h>  // SSE2, part of every x86-64 CPU
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PLEXUS_FINITE_AVX2 1
#endif

#include "core/crc32c.h"
#include "core/model_content.h"
#include "core/shape_text.h"

namespace plexus {
namespace {

static_assert(std::endian::native == std::endian::little, "Plexus assumes a little-endian host");

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new()) { EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr); }
  void Add(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
  std::string HexDigest() {
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int len = 0;
    EVP_DigestFinal_ex(ctx_.get(), md, &len);
    return LowerHex({md, len});
  }

 private:
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx_;
};

}  // namespace

Result<ModelState> ModelState::Create(const std::vector<TensorSpec>& tensors, uint64_t version) {
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, CreateUninitialized(tensors, version));
  std::fill(m.data_.begin(), m.data_.end(), 0.0f);
  return m;
}

Result<ModelState> ModelState::CreateUninitialized(const std::vector<TensorSpec>& tensors, uint64_t version) {
  ModelState m;
  std::set<std::string> seen;
  size_t offset = 0;
  for (const TensorSpec& t : tensors) {
    if (t.name.empty()) return InvalidArgumentError("tensor with an empty name");
    if (!seen.insert(t.name).second) return InvalidArgumentError("duplicate tensor name '" + t.name + "'");
    size_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return InvalidArgumentError("tensor '" + t.name + "' has a negative dimension " + ShapeText(t.shape));
      numel *= static_cast<size_t>(d);
    }
    m.slots_.push_back(TensorSlot{t.name, t.shape, offset, numel});
    offset += numel;
  }
  m.data_.resize(offset);
  m.version_ = version;
  return m;
}

ModelState::ModelState(const ModelState& other)
    : slots_(other.slots_), version_(other.version_), finite_checked_(other.finite_checked_) {
  data_.resize(other.data_.size());  // exactly that size (from empty), values not initialized
  if (!data_.empty()) std::memcpy(data_.data(), other.data_.data(), other.num_bytes());
}

ModelState& ModelState::operator=(const ModelState& other) {
  if (this == &other) return *this;
  slots_ = other.slots_;
  version_ = other.version_;
  finite_checked_ = other.finite_checked_;
  if (data_.size() != other.data_.size()) {
    decltype(data_)().swap(data_);  // freed (to the block cache); growing from empty allocates exactly
    data_.resize(other.data_.size());
  }
  if (!data_.empty()) std::memcpy(data_.data(), other.data_.data(), other.num_bytes());
  return *this;
}

ModelState ModelState::ZerosLike(const ModelState& other) {
  ModelState m;
  m.slots_ = other.slots_;
  m.data_.assign(other.data_.size(), 0.0f);
  return m;
}

ModelState ModelState::UninitializedLike(const ModelState& other) {
  ModelState m;
  m.slots_ = other.slots_;
  m.data_.resize(other.data_.size());
  return m;
}

Status ModelState::CheckSameLayout(const ModelState& expected) const {
  if (slots_.size() != expected.slots_.size()) {
    return InvalidArgumentError("model has " + std::to_string(slots_.size()) + " tensors, expected " +
                                std::to_string(expected.slots_.size()));
  }
  for (size_t i = 0; i < slots_.size(); ++i) {
    const TensorSlot& a = slots_[i];
    const TensorSlot& b = expected.slots_[i];
    if (a.name != b.name) {
      return InvalidArgumentError("tensor #" + std::to_string(i) + " is named '" + a.name + "', expected '" + b.name +
                                  "'");
    }
    if (a.shape != b.shape) {
      return InvalidArgumentError("tensor '" + a.name + "' has shape " + ShapeText(a.shape) + ", expected " +
                                  ShapeText(b.shape));
    }
  }
  return Status::Ok();
}

namespace {

// a[i] = a[i] + sign·b[i] for sign ±1: each value's own IEEE sum or difference, so the same bits
// whatever the width. By hand on x86-64: GCC's -O2 leaves the loop scalar (it cannot rule out
// that the two overlap), and every simulated or received update goes through it.
template <bool kSubtract>
void AddOrSubtract(float* a, const float* b, size_t n) {
  size_t i = 0;
#if defined(__SSE2__)
  for (; i + 8 <= n; i += 8) {
    const __m128 x = _mm_loadu_ps(a + i), y = _mm_loadu_ps(a + i + 4);
    const __m128 u = _mm_loadu_ps(b + i), v = _mm_loadu_ps(b + i + 4);
    _mm_storeu_ps(a + i, kSubtract ? _mm_sub_ps(x, u) : _mm_add_ps(x, u));
    _mm_storeu_ps(a + i + 4, kSubtract ? _mm_sub_ps(y, v) : _mm_add_ps(y, v));
  }
#endif
  for (; i < n; ++i) a[i] = kSubtract ? a[i] - b[i] : a[i] + b[i];
}

}  // namespace

void ModelState::Subtract(const ModelState& other) {
  finite_checked_ = false;
  AddOrSubtract<true>(data_.data(), other.data_.data(), data_.size());
}

void ModelState::Add(const ModelState& other) {
  finite_checked_ = false;
  AddOrSubtract<false>(data_.data(), other.data_.data(), data_.size());
}

void ModelState::Scale(float s) {
  // A finite value times a factor of magnitude at most 1 cannot overflow.
  finite_checked_ = finite_checked_ && std::abs(s) <= 1.0f;
  float* p = data_.data();
  const size_t n = data_.size();
  size_t i = 0;
#if defined(__SSE2__)
  // By hand, as in AllFinite: GCC's -O2 leaves this loop scalar.
  const __m128 factor = _mm_set1_ps(s);
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_ps(p + i, _mm_mul_ps(_mm_loadu_ps(p + i), factor));
    _mm_storeu_ps(p + i + 4, _mm_mul_ps(_mm_loadu_ps(p + i + 4), factor));
  }
#endif
  for (; i < n; ++i) p[i] *= s;
}

#if defined(PLEXUS_FINITE_AVX2)
namespace {

// AllFinite's scan 16 floats at a time, where the CPU has AVX2 (chosen at run time, so one binary
// runs everywhere): about twice the SSE2 loop's rate on values in cache, where decoders check
// them as they arrive. Nonzero when a value among the first *done (a multiple of 16) is not
// finite.
__attribute__((target("avx2"))) uint32_t NonFiniteAvx2(const float* p, size_t n, size_t* done) {
  const __m256i exponent = _mm256_set1_epi32(0x7f800000);
  __m256i a = _mm256_setzero_si256(), b = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i));
    const __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8));
    a = _mm256_or_si256(a, _mm256_cmpeq_epi32(_mm256_and_si256(x, exponent), exponent));
    b = _mm256_or_si256(b, _mm256_cmpeq_epi32(_mm256_and_si256(y, exponent), exponent));
  }
  *done = i;
  return static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_or_si256(a, b)));
}

const bool kFiniteScanAvx2 = __builtin_cpu_supports("avx2");

}  // namespace
#endif

bool AllFinite(std::span<const float> values) {
  // A float is NaN or infinite exactly when its exponent bits are all ones. Compilers leave the
  // float-compare form of this loop scalar, hence the integer form and, on x86-64, SSE2 (and
  // AVX2 where the CPU has it) by hand.
  constexpr uint32_t kExponent = 0x7f800000u;
  const float* p = values.data();
  const size_t n = values.size();
  size_t i = 0;
  uint32_t bad = 0;
#if defined(PLEXUS_FINITE_AVX2)
  if (kFiniteScanAvx2) bad = NonFiniteAvx2(p, n, &i);
#endif
#if defined(__SSE2__)
  const __m128i exponent = _mm_set1_epi32(static_cast<int>(kExponent));
  __m128i a = _mm_setzero_si128(), b = _mm_setzero_si128();
  for (; i + 8 <= n; i += 8) {
    const __m128i x = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i));
    const __m128i y = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 4));
    a = _mm_or_si128(a, _mm_cmpeq_epi32(_mm_and_si128(x, exponent), exponent));
    b = _mm_or_si128(b, _mm_cmpeq_epi32(_mm_and_si128(y, exponent), exponent));
  }
  bad |= static_cast<uint32_t>(_mm_movemask_epi8(_mm_or_si128(a, b)));
#endif
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & kExponent) == kExponent);
  }
  return bad == 0;
}

Status ModelState::CheckFinite() const {
  // The fast scan first; the slot walk below only runs to name the offending value.
  if (finite_checked_ || AllFinite(data_)) return Status::Ok();
  for (const TensorSlot& s : slots_) {
    for (size_t j = 0; j < s.numel; ++j) {
      if (!std::isfinite(data_[s.offset + j])) {
        return InvalidArgumentError("tensor '" + s.name + "' holds a non-finite value (" +
                                    std::to_string(data_[s.offset + j]) + ") at index " + std::to_string(j));
      }
    }
  }
  return Status::Ok();
}

namespace {

// The content encoding's bytes before the values: the tensor count, then each tensor's name
// (length first) and shape (rank first), every number a little-endian uint64.
std::string ContentHead(const std::vector<TensorSlot>& slots) {
  std::string head;
  auto add_u64 = [&head](uint64_t v) { head.append(reinterpret_cast<const char*>(&v), sizeof v); };
  add_u64(slots.size());
  for (const TensorSlot& s : slots) {
    add_u64(s.name.size());
    head += s.name;
    add_u64(s.shape.size());
    for (int64_t d : s.shape) add_u64(static_cast<uint64_t>(d));
  }
  return head;
}

// Pieces of the values hashed and checksummed in turn: small enough to stay in the core's cache
// between the two.
constexpr size_t kDigestPieceBytes = size_t{64} << 10;

}  // namespace

std::string ModelState::ContentSha256() const {
  Sha256 h;
  const std::string head = ContentHead(slots_);
  h.Add(head.data(), head.size());
  h.Add(data_.data(), num_bytes());
  return h.HexDigest();
}

uint32_t ContentHeadCrc32c(const ModelState& model) { return Crc32c(ContentHead(model.tensors())); }

uint32_t ModelState::ContentCrc32c() const {
  return ExtendCrc32c(ContentHeadCrc32c(*this), {reinterpret_cast<const char*>(data_.data()), num_bytes()});
}

ModelState::ContentDigests ModelState::Digests() const {
  Sha256 h;
  const std::string head = ContentHead(slots_);
  h.Add(head.data(), head.size());
  uint32_t crc = Crc32c(head);
  const char* values = reinterpret_cast<const char*>(data_.data());
  for (size_t at = 0; at < num_bytes(); at += kDigestPieceBytes) {
    const size_t n = std::min(kDigestPieceBytes, num_bytes() - at);
    h.Add(values + at, n);
    crc = ExtendCrc32c(crc, {values + at, n});
  }
  return ContentDigests{h.HexDigest(), crc};
}

bool operator==(const ModelState& a, const ModelState& b) {
  if (a.version_ != b.version_ || a.slots_.size() != b.slots_.size() || a.data_.size() != b.data_.size()) return false;
  for (size_t i = 0; i < a.slots_.size(); ++i) {
    if (a.slots_[i].name != b.slots_[i].name || a.slots_[i].shape != b.slots_[i].shape) return false;
  }
  return std::memcmp(a.data_.data(), b.data_.data(), a.num_bytes()) == 0;
}

std::string Sha256Hex(std::span<const unsigned char> bytes) {
  Sha256 h;
  h.Add(bytes.data(), bytes.size());
  return h.HexDigest();
}

std::string Sha256Hex(std::initializer_list<std::string_view> pieces) {
  Sha256 h;
  for (std::string_view p : pieces) h.Add(p.data(), p.size());
  return h.HexDigest();
}

std::string Sha256Hex(const std::string& bytes) {
  return Sha256Hex(std::span<const unsigned char>(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size()));
}

std::string LowerHex(std::span<const unsigned char> bytes) {
  const unsigned char* p = bytes.data();
  const size_t n = bytes.size();
  static const char* kDigits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = kDigits[p[i] >> 4];
    out[2 * i + 1] = kDigits[p[i] & 15];
  }
  return out;
}

}  // namespace plexus
