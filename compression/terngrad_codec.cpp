// terngrad: per tensor a scale and per value a stochastic ternary, unbiased (2 bits per value).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "core/rng.h"

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

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

}  // namespace

Result<std::unique_ptr<Codec>> MakeTernGradCodec(StrategySpec&, ThreadPool*) {
  return std::unique_ptr<Codec>(std::make_unique<TernGradCodec>());
}

}  // namespace plexus
