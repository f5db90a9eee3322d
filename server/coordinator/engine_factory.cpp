#include "server/coordinator/engine_factory.h"

namespace plexus {

AsyncOptions EngineOptions::async_for_mode() const {
  AsyncOptions o = async;
  o.semi_async = mode == Mode::kSemiAsync;
  return o;
}

Status EngineOptions::Validate() const { return mode == Mode::kSync ? sync.Validate() : async_for_mode().Validate(); }

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
