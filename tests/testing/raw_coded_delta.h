// RawCodedDelta: a stand-in for a codec's CodedDelta in tests of parts that may not link the
// codecs (store, engines): its bytes are the float32 values themselves, under the codec name
// "raw". ReadRawCodedDelta is the matching CodedDeltaReader. Immutable; thread-safe.
#pragma once

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "core/coded_delta.h"

namespace plexus::testing {

class RawCodedDelta final : public CodedDelta {
 public:
  explicit RawCodedDelta(std::string bytes) : bytes_(std::move(bytes)) {}
  explicit RawCodedDelta(const std::vector<float>& values) : bytes_(4 * values.size(), '\0') {
    std::memcpy(bytes_.data(), values.data(), bytes_.size());
  }
  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return bytes_.size() / 4; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override {
    for (size_t i = begin; i < end; ++i) sum[i] = (first ? 0.0 : sum[i]) + w * Value(i);
  }
  double SquaredNorm() const override {
    double total = 0.0;
    for (size_t i = 0; i < num_values(); ++i) total += Value(i) * Value(i);
    return total;
  }
  ModelState Materialize(const ModelState& layout) const override {
    ModelState out = ModelState::ZerosLike(layout);
    for (size_t i = 0; i < num_values(); ++i) out.data()[i] = static_cast<float>(Value(i));
    return out;
  }

 private:
  double Value(size_t i) const {
    float v;
    std::memcpy(&v, bytes_.data() + 4 * i, 4);
    return v;
  }
  const std::string codec_ = "raw";
  std::string bytes_;
};

inline Result<std::shared_ptr<const CodedDelta>> ReadRawCodedDelta(const std::string& codec, std::string bytes) {
  if (codec != "raw") return InvalidArgumentError("unknown codec " + codec);
  return std::shared_ptr<const CodedDelta>(std::make_shared<RawCodedDelta>(std::move(bytes)));
}

}  // namespace plexus::testing
