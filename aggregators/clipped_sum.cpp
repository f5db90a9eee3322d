#include "aggregators/clipped_sum.h"

#include <cmath>
#include <string>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/simd_kernels.h"
#include "aggregators/update_buffer.h"

namespace plexus {

void ClippedSum::Reset(const ModelState& base) {
  base_ = base;
  sum_.Reset(base.num_params());
  unclipped_ = 0;
}

Status ClippedSum::Fold(const Update& u, double clip, double scale, const char* strategy) {
  PLEXUS_RETURN_IF_ERROR(CheckUpdate(u, base_, /*needs_examples=*/false, strategy, /*takes_coded=*/true));
  const double norm =
      std::sqrt(u.coded ? u.coded->SquaredNorm() : simd::SquaredNorm(u.delta.data().data(), u.delta.num_params()));
  if (!std::isfinite(norm)) {
    return InvalidArgumentError(std::string(strategy) + ": update from " + u.client_id + " is not finite");
  }
  if (norm <= clip) ++unclipped_;
  const double factor = scale * (norm > clip ? clip / norm : 1.0);
  if (u.coded) {
    sum_.FoldCoded(*u.coded, 1.0, factor);
  } else {
    sum_.Fold(u.delta.data(), 1.0, factor);
  }
  return Status::Ok();
}

Status ClippedSum::FoldPartial(const Update& u, const PartialSumDelta& partial, double clip, double scale,
                               const char* strategy) {
  PLEXUS_RETURN_IF_ERROR(CheckUpdate(u, base_, /*needs_examples=*/false, strategy, /*takes_coded=*/true));
  const ExactSum& exact = partial.sum();
  const auto k = static_cast<double>(exact.count());
  // Read as an update, a partial is the mean of its sum with its total weight: unweighted, the
  // weight is the count and the sum is the mean times it.
  if (exact.count() < 1 || exact.weight() != k) {
    return InvalidArgumentError(std::string(strategy) + ": the partial sum from " + u.client_id + " weighs " +
                                std::to_string(exact.weight()) + " for " + std::to_string(exact.count()) +
                                " updates: central DP needs each client delta clipped and summed unweighted at the "
                                "edge (--strategy norm_bound:max=C,exact=true,weighted=false there)");
  }
  const double norm = std::sqrt(partial.SquaredNorm()) * k;
  if (!std::isfinite(norm)) {
    return InvalidArgumentError(std::string(strategy) + ": the partial sum from " + u.client_id + " is not finite");
  }
  // A little room for the float rounding of the mean the norm is computed from.
  if (norm > k * clip * (1 + 1e-5)) {
    return InvalidArgumentError(std::string(strategy) + ": the partial sum of " + std::to_string(exact.count()) +
                                " updates from " + u.client_id + " has norm " + std::to_string(norm) + ", above " +
                                std::to_string(exact.count()) + " x the clip " + std::to_string(clip) +
                                ": its edge did not clip each update to the clip (norm_bound:max=C,exact=true,"
                                "weighted=false there)");
  }
  sum_.FoldCoded(partial, 1.0, scale * k);
  return Status::Ok();
}

Status ClippedSum::FoldAll(std::span<const Update* const> updates, double clip, const char* strategy) {
  std::vector<const float*> deltas;
  std::vector<double> scales;
  int64_t unclipped = 0;
  for (size_t i = 0; i < updates.size(); ++i) {
    const Update& u = *updates[i];
    const bool plain = !u.coded && u.delta.CheckSameLayout(base_).ok();
    const double norm = plain ? std::sqrt(simd::SquaredNorm(u.delta.data().data(), u.delta.num_params())) : 0;
    if (!plain || !std::isfinite(norm)) {  // one by one from here: Fold reports what is wrong
      FoldBatch(deltas, scales, unclipped);
      for (size_t j = i; j < updates.size(); ++j) PLEXUS_RETURN_IF_ERROR(Fold(*updates[j], clip, 1.0, strategy));
      return Status::Ok();
    }
    if (norm <= clip) ++unclipped;
    deltas.push_back(u.delta.data().data());
    scales.push_back(norm > clip ? clip / norm : 1.0);
  }
  FoldBatch(deltas, scales, unclipped);
  return Status::Ok();
}

void ClippedSum::FoldBatch(std::span<const float* const> deltas, std::span<const double> scales, int64_t unclipped) {
  if (deltas.empty()) return;
  const std::vector<double> weights(deltas.size(), 1.0);
  sum_.FoldBatch(deltas, weights, scales);  // every input is finite: its norm was
  unclipped_ += unclipped;
}

}  // namespace plexus
