#include "server/rpc/update_norm.h"

#include <fmt/format.h>

#include <cmath>
#include <set>

#include "aggregators/simd_kernels.h"

namespace plexus {

UpdateNorms::UpdateNorms(const ModelState& layout, const std::vector<std::string>& buffer_names) {
  const std::set<std::string> names(buffer_names.begin(), buffer_names.end());
  for (const TensorSlot& t : layout.tensors()) (names.count(t.name) ? buffers_ : trainable_).push_back(t);
  if (!buffers_.empty()) coded_layout_ = ModelState::UninitializedLike(layout);
}

double UpdateNorms::TrainableNorm(const ModelState& m) const {
  if (buffers_.empty()) return std::sqrt(simd::SquaredNorm(m.data().data(), m.num_params()));
  double sq = 0;
  for (const TensorSlot& t : trainable_) sq += simd::SquaredNorm(m.data().data() + t.offset, t.numel);
  return std::sqrt(sq);
}

Result<double> UpdateNorms::Measure(const Update& u, const std::string& task_id) const {
  if (buffers_.empty()) return u.coded ? std::sqrt(u.coded->SquaredNorm()) : TrainableNorm(u.delta);
  // Codes are read as ranges of values, not as tensors: a coded update of a model with buffers
  // (a TorchScript model sending compressed updates) is decoded once to read them.
  const ModelState decoded = u.coded ? u.coded->Materialize(*coded_layout_) : ModelState();
  const ModelState& delta = u.coded ? decoded : u.delta;
  for (const TensorSlot& t : buffers_) {
    const std::span<const float> values = delta.data().subspan(t.offset, t.numel);
    for (size_t i = 0; i < values.size(); ++i) {
      if (std::fabs(values[i]) > kMaxBufferChange) {
        return InvalidArgumentError(fmt::format("update for task {} changes buffer {} at index {} by {:g}, beyond {:g}",
                                                task_id, t.name, i, values[i], kMaxBufferChange));
      }
    }
  }
  return TrainableNorm(delta);
}

}  // namespace plexus
