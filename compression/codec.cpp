#include "compression/codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "core/rng.h"

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

// Starts `out` (replacing what it held, keeping its capacity) with the header.
std::string& Header(std::string* out, uint8_t id, uint64_t n) {
  out->assign(kMagic, 4);
  out->push_back(static_cast<char>(id));
  Put<uint64_t>(*out, n);
  return *out;
}

Status CodecError(const std::string& what) { return InvalidArgumentError("compressed update: " + what); }

// Checks the header against the codec and the layout; the payload follows it.
Status CheckHeader(std::string_view bytes, uint8_t id, const ModelState& layout) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return CodecError("not a plexus compressed payload");
  }
  if (static_cast<uint8_t>(bytes[4]) != id) {
    return CodecError("encoded with codec " + std::to_string(static_cast<uint8_t>(bytes[4])) + ", expected " +
                      std::to_string(id));
  }
  if (Get<uint64_t>(bytes, 5) != layout.num_params()) {
    return CodecError("holds " + std::to_string(Get<uint64_t>(bytes, 5)) + " values, the model has " +
                      std::to_string(layout.num_params()));
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

// IEEE binary16, round to nearest even; values beyond the largest half saturate to it.
uint16_t ToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  if (exp == 0xff) return static_cast<uint16_t>(sign | 0x7bffu);  // (the encoder only sees finite values)
  const int32_t e = exp - 127 + 15;
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7bffu);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000u;
    const auto shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  if ((half & 0x7c00u) == 0x7c00u) half = 0x7bffu;  // rounded up past the largest finite half
  return static_cast<uint16_t>(sign | half);
}

float FromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

uint16_t ToBf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  uint32_t r = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
  if ((r & 0x7f80u) == 0x7f80u) r = (x >> 16 & 0x8000u) | 0x7f7fu;  // saturate instead of infinity
  return static_cast<uint16_t>(r);
}
float FromBf16(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

// The decoded delta, checked finite.
Result<ModelState> Finished(ModelState out) {
  PLEXUS_RETURN_IF_ERROR(out.CheckFinite().WithContext("compressed update"));
  return out;
}

class F32Codec final : public Codec {
 public:
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    std::string& out = Header(result, 0, d.num_params());
    out.reserve(EncodedSize(d));
    out.append(reinterpret_cast<const char*>(d.data().data()), d.num_bytes());
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 0, layout));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, layout.num_bytes()));
    ModelState out = ModelState::UninitializedLike(layout);
    std::memcpy(out.data().data(), b.data() + kHeaderBytes, layout.num_bytes());
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + l.num_bytes(); }
  std::string Describe() const override { return "f32"; }
};

template <uint16_t (*To)(float), float (*From)(uint16_t), uint8_t kId>
class Half final : public Codec {
 public:
  explicit Half(const char* name) : name_(name) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    std::string& out = Header(result, kId, d.num_params());
    out.reserve(EncodedSize(d));
    const size_t at = out.size();
    out.resize(at + 2 * d.num_params());
    auto* p = reinterpret_cast<uint16_t*>(out.data() + at);  // (string storage is suitably aligned for memcpy)
    std::span<const float> v = d.data();
    for (size_t i = 0; i < v.size(); ++i) {
      const uint16_t h = To(v[i]);
      std::memcpy(p + i, &h, 2);
    }
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, kId, layout));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 2 * layout.num_params()));
    ModelState out = ModelState::UninitializedLike(layout);
    std::span<float> v = out.data();
    for (size_t i = 0; i < v.size(); ++i) v[i] = From(Get<uint16_t>(b, kHeaderBytes + 2 * i));
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + 2 * l.num_params(); }
  std::string Describe() const override { return name_; }

 private:
  const char* name_;
};

class Int8Codec final : public Codec {
 public:
  explicit Int8Codec(uint32_t chunk) : chunk_(chunk) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    std::span<const float> v = d.data();
    std::string& out = Header(result, 3, v.size());
    out.reserve(EncodedSize(d));
    Put<uint32_t>(out, chunk_);
    for (size_t begin = 0; begin < v.size(); begin += chunk_) {
      const size_t end = std::min(v.size(), begin + chunk_);
      float absmax = 0.0f;
      for (size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::abs(v[i]));
      const float scale = absmax / 127.0f;
      const float inverse = scale > 0 ? 1.0f / scale : 0.0f;
      Put<float>(out, scale);
      const size_t at = out.size();
      out.resize(at + (end - begin));
      char* q = out.data() + at;
      for (size_t i = begin; i < end; ++i) {
        // (|v| x inverse <= 127 up to rounding: the clamp only catches that rounding)
        q[i - begin] = static_cast<char>(static_cast<int8_t>(std::clamp(std::lrintf(v[i] * inverse), -127L, 127L)));
      }
    }
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 3, layout));
    if (b.size() < kHeaderBytes + 4) return CodecError("int8 payload without its chunk size");
    const uint32_t chunk = Get<uint32_t>(b, kHeaderBytes);
    if (chunk == 0) return CodecError("int8 chunk size 0");
    const size_t n = layout.num_params(), chunks = (n + chunk - 1) / chunk;
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 4 + 4 * chunks + n));
    ModelState out = ModelState::UninitializedLike(layout);
    std::span<float> v = out.data();
    size_t at = kHeaderBytes + 4;
    for (size_t begin = 0; begin < n; begin += chunk) {
      const float scale = Get<float>(b, at);
      if (!FiniteScale(scale)) return CodecError("int8 scale " + std::to_string(scale) + " of chunk at " + std::to_string(begin));
      at += 4;
      const size_t end = std::min(n, begin + chunk);
      for (size_t i = begin; i < end; ++i) v[i] = scale * static_cast<float>(static_cast<int8_t>(b[at++]));
    }
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override {
    return kHeaderBytes + 4 + 4 * ((l.num_params() + chunk_ - 1) / chunk_) + l.num_params();
  }
  std::string Describe() const override { return "int8(chunk=" + std::to_string(chunk_) + ")"; }

 private:
  const uint32_t chunk_;
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
    std::nth_element(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(k - 1), idx.end(), [&](uint32_t a, uint32_t b) {
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
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 4, layout));
    if (b.size() < kHeaderBytes + 8) return CodecError("top-k payload without its count");
    const uint64_t k = Get<uint64_t>(b, kHeaderBytes), n = layout.num_params();
    if (k > n) return CodecError("top-k count " + std::to_string(k) + " exceeds the " + std::to_string(n) + " values");
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 8 + 8 * k));
    ModelState out = ModelState::ZerosLike(layout);
    std::span<float> v = out.data();
    size_t at = kHeaderBytes + 8;
    int64_t previous = -1;
    for (uint64_t j = 0; j < k; ++j, at += 8) {
      const uint32_t i = Get<uint32_t>(b, at);
      if (i >= n || static_cast<int64_t>(i) <= previous) {
        return CodecError("top-k index " + std::to_string(i) + " out of range or out of order");
      }
      previous = i;
      v[i] = Get<float>(b, at + 4);
    }
    return Finished(std::move(out));
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + 8 + 8 * K(l.num_params()); }
  std::string Describe() const override { return "topk(ratio=" + std::to_string(ratio_) + ")"; }
  bool uses_residual() const override { return true; }

 private:
  size_t K(size_t n) const {
    return std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio_ * static_cast<double>(n))), 1, std::max<size_t>(n, 1));
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
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 5, layout));
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
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 6, layout));
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
        if (level > levels) return CodecError("qsgd level " + std::to_string(level) + " above " + std::to_string(levels));
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

std::vector<std::string> CodecNames() { return {"f32", "fp16", "bf16", "int8", "topk", "terngrad", "qsgd"}; }

std::string CodecNameOf(std::string_view spec) { return std::string(spec.substr(0, spec.find(':'))); }

Result<std::unique_ptr<Codec>> MakeCodec(std::string_view text) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return InvalidArgumentError("--codec: " + parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  const std::string& name = spec.name();
  std::unique_ptr<Codec> codec;
  auto fail = [](const Status& s) { return InvalidArgumentError("--codec: " + s.message()); };
  if (name == "f32") {
    codec = std::make_unique<F32Codec>();
  } else if (name == "fp16") {
    codec = std::make_unique<Half<ToHalf, FromHalf, 1>>("fp16");
  } else if (name == "bf16") {
    codec = std::make_unique<Half<ToBf16, FromBf16, 2>>("bf16");
  } else if (name == "int8") {
    auto chunk = spec.GetCount("chunk", 4096);
    if (!chunk.ok()) return fail(chunk.status());
    if (*chunk < 1 || *chunk > (int64_t{1} << 30)) return InvalidArgumentError("--codec: int8:chunk must be in [1, 2^30]");
    codec = std::make_unique<Int8Codec>(static_cast<uint32_t>(*chunk));
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
    return InvalidArgumentError("--codec: unknown codec '" + name +
                                "' (known: f32, fp16, bf16, int8[:chunk=C], topk[:ratio=R], terngrad, qsgd[:levels=L])");
  }
  if (Status s = spec.CheckAllUsed(); !s.ok()) return fail(s);
  return codec;
}

}  // namespace plexus
