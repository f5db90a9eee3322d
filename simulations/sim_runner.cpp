#include "simulations/sim_runner.h"

#include <chrono>
#include <cstdio>

#include "compute/model_zoo.h"
#include "core/clock.h"
#include "core/rng.h"
#include "server/store/memory_store.h"

namespace plexus {

Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, Trainer* trainer,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round) {
  if (options.clients <= 0) return InvalidArgumentError("--clients must be positive");
  if (options.sync.clients_per_round > options.clients) {
    return InvalidArgumentError("--clients-per-round (" + std::to_string(options.sync.clients_per_round) +
                                ") exceeds --clients (" + std::to_string(options.clients) + ")");
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  PLEXUS_ASSIGN_OR_RETURN(ModelState initial, InitModel(options.model, options.seed));
  PLEXUS_ASSIGN_OR_RETURN(std::vector<std::vector<uint32_t>> parts,
                          PartitionIndices(train.labels, options.partition, options.clients, options.seed));
  ManualClock clock;
  MemoryStore store;
  SyncOptions sync = options.sync;
  sync.seed = options.seed;
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<SyncEngine> engine,
                          SyncEngine::Open(sync, initial, &store, &clock, evaluator, /*pool=*/nullptr));

  std::vector<std::string> ids(static_cast<size_t>(options.clients));
  for (size_t i = 0; i < ids.size(); ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "sim-%07zu", i);
    PLEXUS_ASSIGN_OR_RETURN(ids[i], engine->Join({name, static_cast<int64_t>(parts[i].size()), "virtual"}));
  }

  SimResult result;
  result.strategy = engine->strategy_description();
  while (!engine->finished()) {
    const uint64_t version = engine->model().version();
    std::vector<std::pair<size_t, Task>> tasks;
    for (size_t i = 0; i < ids.size(); ++i) {
      PLEXUS_ASSIGN_OR_RETURN(PollAnswer a, engine->Poll(ids[i]));
      if (a.kind == PollAnswer::Kind::kTask) tasks.emplace_back(i, a.task);
    }
    if (tasks.empty()) return InternalError("simulation: no round started with " + std::to_string(ids.size()) + " clients");
    const ModelState base = engine->model();
    for (const auto& [i, task] : tasks) {
      DatasetView view{&train, parts[i]};
      const TrainOptions o = TrainOptionsFor(
          task.hyperparams, Rng::Derive(options.seed ^ (0x51ULL << 56), task.round * 1000003ULL + i).NextU64());
      PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, trainer->Train(base, view, o));
      Update u;
      u.client_id = ids[i];
      u.task_id = task.task_id;
      u.base_version = task.model_version;
      u.num_examples = out.num_examples;
      u.local_steps = out.steps;
      u.metrics["train_loss"] = out.mean_loss;
      u.delta = std::move(out.weights);
      u.delta.Subtract(base);
      PLEXUS_RETURN_IF_ERROR(engine->Submit(u).WithContext("simulated client " + ids[i]));
      clock.AdvanceMs(1);
    }
    if (engine->model().version() == version) return InternalError("simulation: round did not close");
    SimRound r{engine->history().back(), elapsed()};
    result.rounds.push_back(r);
    if (on_round) on_round(r);
  }
  result.final_model = engine->model();
  result.model_version = result.final_model.version();
  result.final_model_sha256 = result.final_model.ContentSha256();
  if (!result.rounds.empty() && result.rounds.back().record.test_accuracy) {
    result.final_test_accuracy = *result.rounds.back().record.test_accuracy;
    result.final_test_loss = *result.rounds.back().record.test_loss;
  }
  result.wall_time_s = elapsed();
  return result;
}

}  // namespace plexus
