// qsgd[:levels=L]: per tensor the L2 norm and per value a stochastic level with its sign, unbiased
// (1 byte per value).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/rng.h"

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

class QsgdCodec final : public Codec {
 public:
  explicit QsgdCodec(uint8_t levels) : levels_(levels) {}
  void EncodeTo(const ModelState& d, ModelState*, uint64_t seed, std::string* result) const override {
    Rng rng(seed);
    const size_t tensors = d.tensors().size();
    char* const payload = SizedHeader(result, 6, d.num_params(), EncodedSize(d));
    payload[0] = static_cast<char>(levels_);
    char* const norms = payload + 1;
    auto* values = reinterpret_cast<uint8_t*>(norms + 4 * tensors);  // written in place, not appended
    for (size_t t = 0; t < tensors; ++t) {
      std::span<const float> v = d.tensor(t);
      double sq = 0.0;
      for (float x : v) sq += static_cast<double>(x) * x;
      const auto norm = static_cast<float>(std::sqrt(sq));
      std::memcpy(norms + 4 * t, &norm, 4);
      for (float x : v) {
        const double r = norm > 0 ? std::abs(x) / norm * levels_ : 0.0;
        // floor(r) by conversion (r >= 0; a NaN from an infinite value gives level 0, as the
        // conversion of floor's NaN did on x86-64): std::floor is a call where the baseline
        // x86-64 has no rounding instruction.
        const uint32_t whole = r >= 0.0 ? static_cast<uint32_t>(r) : 0u;
        uint32_t level = whole;
        if (rng.Uniform() < r - static_cast<double>(whole)) ++level;
        level = std::min<uint32_t>(level, levels_);
        *values++ = static_cast<uint8_t>((x < 0 ? 0x80u : 0u) | level);
      }
    }
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 6, layout.num_params()));
    const size_t tensors = layout.tensors().size(), n = layout.num_params();
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 1 + 4 * tensors + n));
    const auto levels = static_cast<uint8_t>(b[kHeaderBytes]);
    if (levels == 0 || levels > 127) return CodecError("qsgd levels " + std::to_string(levels));
    // Every level checked first (a maximum, which vectorizes), then decoded in a loop without a
    // way out (which vectorizes too; the check inside it kept it one value at a time).
    const auto* codes = reinterpret_cast<const uint8_t*>(b.data()) + kHeaderBytes + 1 + 4 * tensors;
    uint8_t highest = 0;
    for (size_t i = 0; i < n; ++i) highest = std::max<uint8_t>(highest, codes[i] & 0x7fu);
    if (highest > levels) {
      return CodecError("qsgd level " + std::to_string(highest) + " above " + std::to_string(levels));
    }
    ModelState out = ModelState::UninitializedLike(layout);
    for (size_t t = 0; t < tensors; ++t) {
      const float norm = Get<float>(b, kHeaderBytes + 1 + 4 * t);
      if (!FiniteScale(norm)) return CodecError("qsgd norm of tensor " + layout.tensors()[t].name + " not finite");
      std::span<float> x = out.tensor(t);
      const uint8_t* in = codes + layout.tensors()[t].offset;
      for (size_t i = 0; i < x.size(); ++i) {
        x[i] = (in[i] & 0x80u ? -1.0f : 1.0f) * norm * static_cast<float>(in[i] & 0x7fu) / static_cast<float>(levels);
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

Result<std::unique_ptr<Codec>> MakeQsgdCodec(StrategySpec& spec, ThreadPool*) {
  PLEXUS_ASSIGN_OR_RETURN(const int64_t levels, spec.GetCount("levels", 16));
  if (levels < 1 || levels > 127) return InvalidArgumentError("qsgd:levels must be in [1, 127]");
  return std::unique_ptr<Codec>(std::make_unique<QsgdCodec>(static_cast<uint8_t>(levels)));
}

}  // namespace plexus
