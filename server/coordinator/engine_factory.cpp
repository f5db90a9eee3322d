#include "server/coordinator/engine_factory.h"

namespace plexus {

AsyncOptions EngineOptions::async_for_mode() const {
  AsyncOptions o = async;
  o.semi_async = mode == Mode::kSemiAsync;
  o.secagg = sync.secagg;  // the flag binds into the sync options
  return o;
}

Status CheckSecAggMode(Mode mode, const SyncOptions& sync) {
  if (sync.secagg && mode == Mode::kSemiAsync) {
    return InvalidArgumentError(
        "--secagg with --mode semiasync: secure groups run in sync rounds and FedBuff "
        "buffers (--mode sync or async); FedCompass forms its groups by speed as updates "
        "arrive");
  }
  return Status::Ok();
}

Status EngineOptions::Validate() const {
  PLEXUS_RETURN_IF_ERROR(CheckSecAggMode(mode, sync));
  return mode == Mode::kSync ? sync.Validate() : async_for_mode().Validate();
}

Result<std::unique_ptr<Engine>> OpenEngine(const EngineOptions& options, const ModelState& initial_model, Store* store,
                                           const Clock* clock, ModelEvaluator* evaluator, ThreadPool* pool) {
  if (options.mode == Mode::kSync) {
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<SyncEngine> e,
                            SyncEngine::Open(options.sync, initial_model, store, clock, evaluator, pool));
    return std::unique_ptr<Engine>(std::move(e));
  }
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncEngine> e,
                          AsyncEngine::Open(options.async_for_mode(), initial_model, store, clock, evaluator, pool));
  return std::unique_ptr<Engine>(std::move(e));
}

}  // namespace plexus
