#include "aggregators/partial_sum_delta.h"

#include <cstring>

namespace plexus {

Result<std::shared_ptr<const PartialSumDelta>> PartialSumDelta::Make(std::string codec, std::string bytes,
                                                                     ExactSum sum) {
  if (sum.empty()) return InvalidArgumentError("a partial sum of no updates");
  std::vector<float> mean(sum.size());
  PLEXUS_RETURN_IF_ERROR(sum.MeanInto(mean));
  return std::shared_ptr<const PartialSumDelta>(
      new PartialSumDelta(std::move(codec), std::move(bytes), std::move(sum), std::move(mean)));
}

void PartialSumDelta::AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const {
  const float* v = mean_.data();
  if (first) {
    for (size_t i = begin; i < end; ++i) sum[i] = w * static_cast<double>(v[i]);
  } else {
    for (size_t i = begin; i < end; ++i) sum[i] += w * static_cast<double>(v[i]);
  }
}

double PartialSumDelta::SquaredNorm() const {
  double s = 0;
  for (float x : mean_) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}

ModelState PartialSumDelta::Materialize(const ModelState& layout) const {
  ModelState out = ModelState::UninitializedLike(layout);
  std::memcpy(out.data().data(), mean_.data(), mean_.size() * sizeof(float));
  return out;
}

}  // namespace plexus
