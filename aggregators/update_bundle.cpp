#include "aggregators/update_bundle.h"

#include <algorithm>
#include <cstring>

namespace plexus {

Result<std::shared_ptr<const UpdateBundle>> UpdateBundle::Make(std::string codec, std::string bytes, size_t values,
                                                               std::vector<Update> updates) {
  if (updates.empty()) return InvalidArgumentError("a bundle of no updates");
  for (const Update& u : updates) {
    const size_t n = u.coded ? u.coded->num_values() : u.delta.num_params();
    if (n != values) {
      return InvalidArgumentError("a bundled update of " + std::to_string(n) + " values for a model of " +
                                  std::to_string(values));
    }
  }
  return std::shared_ptr<const UpdateBundle>(
      new UpdateBundle(std::move(codec), std::move(bytes), values, std::move(updates)));
}

void UpdateBundle::AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const {
  const double each = w / static_cast<double>(updates_.size());
  for (size_t k = 0; k < updates_.size(); ++k) {
    const Update& u = updates_[k];
    if (u.coded) {
      u.coded->AddScaledTo(sum, begin, end, each, first && k == 0);
      continue;
    }
    const float* v = u.delta.data().data();
    for (size_t i = begin; i < end; ++i) {
      const double x = each * static_cast<double>(v[i]);
      sum[i] = first && k == 0 ? x : sum[i] + x;
    }
  }
}

double UpdateBundle::SquaredNorm() const {
  double largest = 0;
  for (const Update& u : updates_) {
    double s = 0;
    if (u.coded) {
      s = u.coded->SquaredNorm();
    } else {
      for (float x : u.delta.data()) s += static_cast<double>(x) * static_cast<double>(x);
    }
    largest = std::max(largest, s);
  }
  return largest;
}

ModelState UpdateBundle::Materialize(const ModelState& layout) const {
  std::vector<double> sum(values_);
  AddScaledTo(sum.data(), 0, values_, 1.0, /*first=*/true);
  ModelState out = ModelState::UninitializedLike(layout);
  std::span<float> v = out.data();
  for (size_t i = 0; i < values_; ++i) v[i] = static_cast<float>(sum[i]);
  return out;
}

std::vector<Update> UnbundledUpdates(const Update& update) {
  const auto* bundle = dynamic_cast<const UpdateBundle*>(update.coded.get());
  if (bundle == nullptr) return {update};
  std::vector<Update> out = bundle->updates();
  for (Update& u : out) u.client_id = update.client_id + "/" + u.client_id;
  return out;
}

std::span<const Update> BundledOrSelf(const Update& update) {
  if (const auto* bundle = dynamic_cast<const UpdateBundle*>(update.coded.get())) return bundle->updates();
  return std::span<const Update>(&update, 1);
}

}  // namespace plexus
