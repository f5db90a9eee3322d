// UpdateNorms: what the server's norm bounds measure of an update. Only the trainable tensors
// count in its L2 norm: buffers (a TorchScript model's BatchNorm running statistics) follow the
// data's scale, not the step's, and on unnormalized features their change alone exceeded the
// adaptive bound for every honest client. Buffers get their own check instead: each changed
// value must be within kMaxBufferChange (non-finite values are left to the engine, which names
// the tensor and index).
// Immutable after construction; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/update.h"

namespace plexus {

class UpdateNorms {
 public:
  // No buffer changes by more than this in one update: far beyond any running mean or variance
  // of real data in float32, far below what overflows when the model averages it.
  static constexpr double kMaxBufferChange = 1e15;

  // `buffer_names`: the tensors of `layout` that are buffers; names the layout lacks are ignored.
  UpdateNorms(const ModelState& layout, const std::vector<std::string>& buffer_names);

  // The L2 norm of `u`'s trainable values (its float32 delta or its codes).
  double TrainableNorm(const Update& u) const;
  // The L2 norm of a model's trainable values.
  double TrainableNorm(const ModelState& m) const;
  // OK when every finite buffer value of `u` changes by at most kMaxBufferChange; otherwise
  // InvalidArgument naming the tensor and index.
  Status CheckBuffers(const Update& u, const std::string& task_id) const;

  bool has_buffers() const { return !buffers_.empty(); }

 private:
  std::vector<TensorSlot> trainable_;
  std::vector<TensorSlot> buffers_;
};

}  // namespace plexus
