// f32: the float32 values as they are (the baseline: 4 bytes per value).
#include <cstring>
#include <memory>

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

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

}  // namespace

Result<std::unique_ptr<Codec>> MakeF32Codec(StrategySpec&, ThreadPool* pool) {
  return std::unique_ptr<Codec>(std::make_unique<F32Codec>(pool));
}

}  // namespace plexus
