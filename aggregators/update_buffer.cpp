#include "aggregators/update_buffer.h"

#include <algorithm>
#include <atomic>

#include "aggregators/simd_kernels.h"
#include "aggregators/streaming_mean.h"

namespace plexus {

Status CheckUpdate(const Update& update, const ModelState& base, bool needs_examples, const char* strategy,
                   bool takes_coded) {
  const std::string who = std::string(strategy) + ": update from client " + update.client_id;
  if (update.coded && !takes_coded) {
    return InvalidArgumentError(who + " carries coded values; this strategy folds float32 deltas only");
  }
  if (update.coded && update.coded->num_values() != base.num_params()) {
    return InvalidArgumentError(who + " holds " + std::to_string(update.coded->num_values()) +
                                " coded values, the model has " + std::to_string(base.num_params()));
  }
  if (!update.coded) {
    PLEXUS_RETURN_IF_ERROR(update.delta.CheckSameLayout(base).WithContext(who));
    PLEXUS_RETURN_IF_ERROR(update.delta.CheckFinite().WithContext(who));
  }
  if (needs_examples && update.num_examples <= 0) {
    return InvalidArgumentError(who + " reports " + std::to_string(update.num_examples) +
                                " examples; a positive count is needed");
  }
  return Status::Ok();
}

void UpdateBuffer::Reset(const ModelState& base) {
  base_ = base;
  Clear();
  sorted_ = true;
}

void UpdateBuffer::Clear() {
  for (size_t i = 0; i < size_; ++i) updates_[i].held.reset();
  size_ = 0;
}

Status UpdateBuffer::AddShared(std::shared_ptr<const Update> update, const char* strategy) {
  PLEXUS_RETURN_IF_ERROR(AddView(*update, strategy));
  updates_[size_ - 1].held = std::move(update);
  return Status::Ok();
}

Status UpdateBuffer::Add(const Update& update, const char* strategy) {
  if (!update.delta.CheckSameLayout(base_).ok() || update.num_examples <= 0) {
    return CheckUpdate(update, base_, /*needs_examples=*/true, strategy);
  }
  if (size_ == updates_.size()) updates_.emplace_back();
  BufferedUpdate& b = updates_[size_];
  // Copy and finiteness check in one pass; the slot only counts once the check passed.
  const std::span<const float> src = update.delta.data();
  b.storage.resize(src.size());
  std::atomic<bool> bad{false};
  ForRanges(pool_, src.size(), [&](size_t begin, size_t end) {
    if (simd::CopyCheckingFinite(b.storage.data() + begin, src.data() + begin, end - begin)) bad = true;
  });
  if (bad) return CheckUpdate(update, base_, /*needs_examples=*/true, strategy);
  b.delta = b.storage;
  Record(update, b);
  return Status::Ok();
}

Status UpdateBuffer::AddView(const Update& update, const char* strategy) {
  PLEXUS_RETURN_IF_ERROR(CheckUpdate(update, base_, /*needs_examples=*/true, strategy));
  if (size_ == updates_.size()) updates_.emplace_back();
  BufferedUpdate& b = updates_[size_];
  b.delta = update.delta.data();
  Record(update, b);
  return Status::Ok();
}

void UpdateBuffer::Record(const Update& update, BufferedUpdate& b) {
  ++size_;
  b.client_id = update.client_id;
  b.task_id = update.task_id;
  b.examples = static_cast<double>(update.num_examples);
  b.local_steps = update.local_steps;
  sorted_ = false;
}

std::span<const BufferedUpdate> UpdateBuffer::Sorted() {
  if (!sorted_) {
    std::sort(updates_.begin(), updates_.begin() + static_cast<ptrdiff_t>(size_),
              [](const BufferedUpdate& a, const BufferedUpdate& b) {
                return a.client_id != b.client_id ? a.client_id < b.client_id : a.task_id < b.task_id;
              });
    sorted_ = true;
  }
  return std::span<const BufferedUpdate>(updates_.data(), size_);
}

ModelState ApplyDelta(const ModelState& base, std::span<const double> delta, double scale, ThreadPool* pool) {
  ModelState out = ModelState::UninitializedLike(base);
  out.set_version(base.version() + 1);
  float* x = out.data().data();
  const float* b = base.data().data();
  const double* d = delta.data();
  ForRanges(pool, delta.size(), [=](size_t begin, size_t end) {
    simd::ApplyScaledSum(x + begin, b + begin, d + begin, scale, end - begin);
  });
  return out;
}

}  // namespace plexus
