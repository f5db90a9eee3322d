// UpdateBuffer: the updates of one aggregation kept in memory, for rules that need all of them
// at once (robust aggregators). Add() validates like every aggregator (layout, finite values,
// positive example count) and copies the delta; AddView() validates and keeps a view of it (one
// aggregation over updates its caller holds: no copy, so the rule reads each value once from
// where it already is); Sorted() returns them ordered by client id (then task id), so results do
// not depend on arrival order. Memory: n x model (copies), nothing per update for views.
// Thread-compatible.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/update.h"

namespace plexus {

struct BufferedUpdate {
  std::string client_id;
  std::string task_id;
  double examples = 0;
  int64_t local_steps = 0;
  std::span<const float> delta;  // the values: `storage`, or the update's own for a view
  // A copy's values (kept for reuse when the slot next holds a view); from the large-block cache
  // and not zero-filled, as model buffers are: Add writes every value.
  std::vector<float, ModelBufferAllocator<float>> storage;
  std::shared_ptr<const Update> held;  // a shared view's update, kept alive until Reset or Clear
};

class UpdateBuffer {
 public:
  // Copies run on `pool` when there is one (not owned; must outlive the buffer).
  explicit UpdateBuffer(ThreadPool* pool = nullptr) : pool_(pool) {}
  void Reset(const ModelState& base);
  // InvalidArgument for a wrong layout, non-finite values or a non-positive example count; the
  // buffer is unchanged then. `strategy` names the caller in messages.
  Status Add(const Update& update, const char* strategy);
  // As Add, keeping a view of the update's values instead of a copy. REQUIRES: `update` outlives
  // the buffer's next Reset or Clear.
  Status AddView(const Update& update, const char* strategy);
  // As AddView, the buffer holding the update until its next Reset or Clear.
  Status AddShared(std::shared_ptr<const Update> update, const char* strategy);
  size_t size() const { return size_; }
  const ModelState& base() const { return base_; }
  // Sorts (once) and returns the updates in canonical order.
  std::span<const BufferedUpdate> Sorted();
  // Forgets the updates but keeps their storage for the next round (no new pages to fault in).
  void Clear();

 private:
  // The slot after the last in use now holds `update`'s values: it counts, with its ids.
  void Record(const Update& update, BufferedUpdate& b);

  ThreadPool* const pool_;
  ModelState base_;
  std::vector<BufferedUpdate> updates_;  // [0, size_) in use; the rest is spare storage
  size_t size_ = 0;
  bool sorted_ = true;
};

// Validation shared by every aggregator's Fold. An update with coded values (which its codec
// checked finite when it read them) must have the base's size, and is refused unless
// `takes_coded` (the strategy folds codes: the averaging family).
Status CheckUpdate(const Update& update, const ModelState& base, bool needs_examples, const char* strategy,
                   bool takes_coded = false);

// base + scale x delta (in double, rounded once), version base.version() + 1; on `pool` when given.
ModelState ApplyDelta(const ModelState& base, std::span<const double> delta, double scale, ThreadPool* pool);

}  // namespace plexus
