// terngrad: per tensor a scale and per value a stochastic ternary, unbiased (2 bits per value).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
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

// The largest |x| of v, NaN ignored (as a running std::max ignores it): the magnitudes' bits
// without the sign order as the magnitudes do, and an integer maximum over them vectorizes where
// a float one, which must keep NaN out in order, did not. Exact: the same value either way.
float LargestMagnitude(std::span<const float> v) {
  uint32_t largest = 0;
  for (float x : v) {
    const uint32_t key = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
    largest = std::max(largest, key > 0x7f800000u ? 0u : key);  // a NaN counts as 0
  }
  return std::bit_cast<float>(largest);
}

class TernGradCodec final : public Codec {
 public:
  void EncodeTo(const ModelState& d, ModelState*, uint64_t seed, std::string* result) const override {
    Rng rng(seed);
    const size_t tensors = d.tensors().size();
    char* const scales = SizedHeader(result, 5, d.num_params(), EncodedSize(d));
    auto* const codes = reinterpret_cast<uint8_t*>(scales + 4 * tensors);
    // Four 2-bit codes to a byte, lowest first, gathered in a register: or-ing each into its
    // byte in memory made every value wait for the store of the one before it.
    size_t pos = 0;
    unsigned byte = 0;
    for (size_t t = 0; t < tensors; ++t) {
      std::span<const float> v = d.tensor(t);
      const float s = LargestMagnitude(v);
      std::memcpy(scales + 4 * t, &s, 4);
      for (float x : v) {
        // No draw at all for a tensor of zeros, as the stream has always been drawn.
        const bool keep = s > 0 && rng.Uniform() < std::abs(x) / s;
        const unsigned code = !keep ? 0u : (x > 0 ? 1u : 2u);
        byte |= code << (2 * (pos % 4));
        if (pos % 4 == 3) {
          codes[pos / 4] = static_cast<uint8_t>(byte);
          byte = 0;
        }
        ++pos;
      }
    }
    if (pos % 4 != 0) codes[pos / 4] = static_cast<uint8_t>(byte);
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 5, layout.num_params()));
    const size_t tensors = layout.tensors().size(), n = layout.num_params();
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, 4 * tensors + (n + 3) / 4));
    const auto* codes = reinterpret_cast<const uint8_t*>(b.data()) + kHeaderBytes + 4 * tensors;
    auto code = [codes](size_t pos) { return (codes[pos / 4] >> (2 * (pos % 4))) & 3u; };
    // Code 3 anywhere, checked first: a byte with both bits of a pair set (the last byte's pairs
    // past the n values are padding, not looked at, as before).
    unsigned both = 0;
    for (size_t i = 0; i < n / 4; ++i) both |= codes[i] & (codes[i] >> 1) & 0x55u;
    for (size_t pos = n / 4 * 4; pos < n; ++pos) both |= code(pos) == 3;
    if (both != 0) {
      size_t pos = 0;
      while (code(pos) != 3) ++pos;
      return CodecError("terngrad code 3 at value " + std::to_string(pos));
    }
    ModelState out = ModelState::UninitializedLike(layout);
    size_t pos = 0;
    for (size_t t = 0; t < tensors; ++t) {
      const float s = Get<float>(b, kHeaderBytes + 4 * t);
      if (!FiniteScale(s)) return CodecError("terngrad scale of tensor " + layout.tensors()[t].name + " not finite");
      // A value per code from a table rather than by branches on it (the codes are coin tosses).
      const float value[4] = {0.0f, s, -s, 0.0f};
      for (float& x : out.tensor(t)) x = value[code(pos++)];
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
