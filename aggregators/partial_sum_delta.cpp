#include "aggregators/partial_sum_delta.h"

#include "aggregators/update_bundle.h"

#include <cstring>

namespace plexus {

const PartialSumDelta* PartialSumOf(const Update& update) {
  return dynamic_cast<const PartialSumDelta*>(update.coded.get());
}

std::vector<MergedUpdate> MergedEntriesOf(const Update& update, bool hash) {
  if (const auto* bundle = dynamic_cast<const UpdateBundle*>(update.coded.get())) {  // each under its path
    std::vector<MergedUpdate> out;
    for (const Update& inner : bundle->updates()) {
      for (MergedUpdate& m : MergedEntriesOf(inner, hash)) {
        m.client_id = update.client_id + "/" + m.client_id;
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  const PartialSumDelta* partial = PartialSumOf(update);
  if (partial == nullptr || partial->contributions().empty()) {
    MergedUpdate m{update.client_id, update.task_id};
    if (hash && partial == nullptr) {
      m.update_sha256 = update.coded ? Sha256Hex(update.coded->bytes()) : update.delta.ContentSha256();
    }
    return {std::move(m)};
  }
  std::vector<MergedUpdate> out;
  out.reserve(partial->contributions().size());
  for (const PartialContribution& c : partial->contributions()) {
    MergedUpdate m{update.client_id + "/" + c.client_path, c.task_id};
    m.update_sha256 = c.update_sha256;
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::shared_ptr<const PartialSumDelta>> PartialSumDelta::Make(std::string codec, std::string bytes, ExactSum sum,
                                                                     std::vector<PartialContribution> contributions) {
  if (sum.empty()) return InvalidArgumentError("a partial sum of no updates");
  std::vector<float> mean(sum.size());
  PLEXUS_RETURN_IF_ERROR(sum.MeanInto(mean));
  return std::shared_ptr<const PartialSumDelta>(new PartialSumDelta(std::move(codec), std::move(bytes), std::move(sum),
                                                                    std::move(mean), std::move(contributions)));
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
