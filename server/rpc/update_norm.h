// UpdateNorms: what the server's norm bounds measure of an update. Only the trainable tensors
// count in its L2 norm: buffers (a TorchScript model's BatchNorm running statistics) follow the
// data's scale, not the step's, and on unnormalized features their change alone exceeded the
// adaptive bound for every honest client. Buffers get their own check instead: each changed
// value must be within kMaxBufferChange (non-finite values are left to the engine, which names
// the tensor and index).
// Immutable after construction; thread-safe.
#pragma once

#include <optional>
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

  // The L2 norm of `u`'s trainable values (its float32 delta or its codes), after checking its
  // buffers: InvalidArgument naming the tensor and index of a finite buffer value that changes by
  // more than kMaxBufferChange. One pass over the buffers; without buffers, none.
  Result<double> Measure(const Update& u, const std::string& task_id) const;
  // The L2 norm of a model's trainable values.
  double TrainableNorm(const ModelState& m) const;

  bool has_buffers() const { return !buffers_.empty(); }

 private:
  std::vector<TensorSlot> trainable_;
  std::vector<TensorSlot> buffers_;
  // With buffers: the layout (values unset) a coded update is decoded into to read them; only
  // its layout is read, so it costs no pass over memory.
  std::optional<ModelState> coded_layout_;
};

}  // namespace plexus
