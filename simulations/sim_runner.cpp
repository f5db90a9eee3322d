#include "simulations/sim_runner.h"

#include <algorithm>
#include <memory>
#include <thread>

#include "compute/model_zoo.h"
#include "core/clock.h"
#include "core/thread_pool.h"
#include "server/coordinator/engine_factory.h"
#include "server/store/memory_store.h"
#include "simulations/federation_sim.h"

namespace plexus {
namespace {

// The engine of the run's mode, through the factory the server uses too, with the simulator's
// seed and its tick as the poll retry.
Result<std::unique_ptr<Engine>> OpenSimEngine(const SimOptions& o, const ModelState& initial, Store* store,
                                              const Clock* clock, ModelEvaluator* evaluator, ThreadPool* pool) {
  EngineOptions options{o.mode, o.sync, o.async};
  options.sync.seed = o.seed;
  options.sync.poll_retry_ms = FederationSim::kTickMs;
  static_cast<SharedEngineOptions&>(options.async) = options.sync;  // the shared flags bind into sync
  return OpenEngine(options, initial, store, clock, evaluator, pool);
}

}  // namespace

Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, TaskRunner* runner,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  ModelState initial;
  if (options.initial) {
    initial = *options.initial;
  } else {
    PLEXUS_ASSIGN_OR_RETURN(initial, InitModel(options.model, options.seed));
  }
  PLEXUS_ASSIGN_OR_RETURN(ClientData data, ClientData::Make(train.labels, options.partition, options.clients,
                                                            options.examples_per_client, options.seed));
  if (options.mode == Mode::kSync) PLEXUS_RETURN_IF_ERROR(CheckRoundsCanClose(options, data, initial.num_params()));
  ManualClock clock;
  MemoryStore store(/*keep_recovery_data=*/false);
  // Secure aggregation's unmasking on every core, as plexus server runs it.
  std::unique_ptr<ThreadPool> pool;
  if (options.sync.secagg) pool = std::make_unique<ThreadPool>(std::max(1u, std::thread::hardware_concurrency()));
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                          OpenSimEngine(options, initial, &store, &clock, evaluator, pool.get()));
  for (size_t i = 0; i < static_cast<size_t>(options.clients); ++i) {
    PLEXUS_ASSIGN_OR_RETURN(std::string id, engine->Join({FederationSim::ClientName(i), data.examples(i), "virtual"}));
    if (id != FederationSim::ClientName(i))
      return InternalError("simulation: the engine renamed client " + FederationSim::ClientName(i));
  }
  FederationSim sim(options, train, runner, std::move(data), engine.get(), &clock, initial.num_params() * sizeof(float),
                    on_round);
  return sim.Run();
}

}  // namespace plexus
