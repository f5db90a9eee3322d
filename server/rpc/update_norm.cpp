#include "server/rpc/update_norm.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "aggregators/simd_kernels.h"

namespace plexus {
namespace {

// The values of `u` in `slot`, decoded from its codes when it has them.
std::vector<double> ValuesIn(const Update& u, const TensorSlot& slot) {
  std::vector<double> v(slot.numel);
  if (u.coded) {
    // AddScaledTo writes sum[i] for the model's indices i: `v` stands for sum[offset, offset + numel).
    u.coded->AddScaledTo(v.data() - slot.offset, slot.offset, slot.offset + slot.numel, 1.0, /*first=*/true);
  } else {
    const std::span<const float> d = u.delta.data().subspan(slot.offset, slot.numel);
    std::copy(d.begin(), d.end(), v.begin());
  }
  return v;
}

}  // namespace

UpdateNorms::UpdateNorms(const ModelState& layout, const std::vector<std::string>& buffer_names) {
  const std::set<std::string> names(buffer_names.begin(), buffer_names.end());
  for (const TensorSlot& t : layout.tensors()) (names.count(t.name) ? buffers_ : trainable_).push_back(t);
}

double UpdateNorms::TrainableNorm(const ModelState& m) const {
  if (buffers_.empty()) return std::sqrt(simd::SquaredNorm(m.data().data(), m.num_params()));
  double sq = 0;
  for (const TensorSlot& t : trainable_) sq += simd::SquaredNorm(m.data().data() + t.offset, t.numel);
  return std::sqrt(sq);
}

double UpdateNorms::TrainableNorm(const Update& u) const {
  if (!u.coded) return TrainableNorm(u.delta);
  if (buffers_.empty()) return std::sqrt(u.coded->SquaredNorm());
  // Codes are folded per range, not read per tensor: the whole norm less the buffers' (small).
  double buffer_sq = 0;
  for (const TensorSlot& t : buffers_) {
    for (double v : ValuesIn(u, t)) buffer_sq += v * v;
  }
  return std::sqrt(std::max(0.0, u.coded->SquaredNorm() - buffer_sq));
}

Status UpdateNorms::CheckBuffers(const Update& u, const std::string& task_id) const {
  for (const TensorSlot& t : buffers_) {
    const std::vector<double> values = ValuesIn(u, t);
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::fabs(values[i]) > kMaxBufferChange) {
        return InvalidArgumentError(fmt::format("update for task {} changes buffer {} at index {} by {:g}, beyond {:g}",
                                                task_id, t.name, i, values[i], kMaxBufferChange));
      }
    }
  }
  return Status::Ok();
}

}  // namespace plexus
