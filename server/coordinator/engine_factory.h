// The one place that opens the engine of a federation mode: the server and the simulator both
// open their engines here. Stateless; thread-safe.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "server/coordinator/async_engine.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/evaluator.h"
#include "server/coordinator/mode.h"
#include "server/coordinator/sync_engine.h"
#include "server/store/store.h"

namespace plexus {

// The settings of a mode's engine: `sync` in sync mode, `async` in the others (whose semi_async
// the mode decides).
struct EngineOptions {
  Mode mode = Mode::kSync;
  SyncOptions sync;
  AsyncOptions async;

  // The options of the mode's engine, with semi_async set from the mode.
  AsyncOptions async_for_mode() const;
  // The mode's options' own Validate.
  Status Validate() const;
};

// Opens (or resumes from `store`) the engine of options.mode; arguments as in SyncEngine::Open.
// InvalidArgument when secure aggregation is asked of a mode that does not run it (only sync rounds do).
Status CheckSecAggMode(Mode mode, const SyncOptions& sync);

Result<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options, const ModelState& initial_model, Store* store,
                                           const Clock* clock, ModelEvaluator* evaluator, ThreadPool* pool);

}  // namespace plexus
