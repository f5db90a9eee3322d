#include "simulations/sim_runner.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <optional>
#include <queue>
#include <algorithm>

#include "compute/model_zoo.h"
#include "core/clock.h"
#include "core/rng.h"
#include "server/store/memory_store.h"
#include "simulations/attack.h"

namespace plexus {
namespace {

constexpr int64_t kTickMs = 100;

struct Event {
  int64_t at_ms = 0;
  uint64_t seq = 0;      // ties in time go in the order the events were made
  size_t client = 0;
  bool finish = false;   // submit the client's update (else: the client polls)
  bool operator>(const Event& o) const { return at_ms != o.at_ms ? at_ms > o.at_ms : seq > o.seq; }
};

Result<std::unique_ptr<Engine>> OpenEngine(const SimOptions& o, const ModelState& initial, Store* store,
                                           const Clock* clock, ModelEvaluator* evaluator) {
  if (o.mode == "sync") {
    SyncOptions sync = o.sync;
    sync.seed = o.seed;
    sync.poll_retry_ms = kTickMs;
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<SyncEngine> e, SyncEngine::Open(sync, initial, store, clock, evaluator, nullptr));
    return std::unique_ptr<Engine>(std::move(e));
  }
  if (o.mode == "async" || o.mode == "semiasync") {
    AsyncOptions async = o.async;
    async.rounds = o.sync.rounds;
    async.task = o.sync.task;
    async.semi_async = o.mode == "semiasync";
    async.poll_retry_ms = kTickMs;
    PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncEngine> e,
                            AsyncEngine::Open(async, initial, store, clock, evaluator, nullptr));
    return std::unique_ptr<Engine>(std::move(e));
  }
  return InvalidArgumentError("unknown mode '" + o.mode + "' (sync, async or semiasync)");
}

}  // namespace

Result<DeviceSpeeds> DeviceSpeeds::Profile(const std::string& name) {
  if (name == "uniform") return DeviceSpeeds{10.0, 1.0, 50, 0.0};
  if (name == "heterogeneous") return DeviceSpeeds{10.0, 10.0, 100, 0.05};
  if (name == "mobile") return DeviceSpeeds{30.0, 20.0, 500, 0.2};
  return InvalidArgumentError("unknown device profile '" + name + "' (known: uniform, heterogeneous, mobile)");
}

Status DeviceSpeeds::Validate() const {
  if (!(dropout >= 0 && dropout < 1)) return InvalidArgumentError("dropout must lie in [0, 1)");
  if (!(ms_per_step > 0)) return InvalidArgumentError("ms-per-step must be positive");
  if (!(speed_ratio >= 1)) return InvalidArgumentError("speed-ratio must be at least 1");
  if (task_overhead_ms < 0) return InvalidArgumentError("task-overhead-ms must not be negative");
  return Status::Ok();
}

std::vector<double> DeviceSpeeds::Assign(size_t n, uint64_t seed) const {
  std::vector<size_t> rank(n);
  std::iota(rank.begin(), rank.end(), size_t{0});
  Rng rng = Rng::Derive(seed, 0x5beedULL);
  rng.Shuffle(std::span<size_t>(rank));
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double position = n > 1 ? static_cast<double>(rank[i]) / static_cast<double>(n - 1) : 0.0;
    out[i] = ms_per_step * std::pow(speed_ratio, position);
  }
  return out;
}

Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, Trainer* trainer,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round) {
  if (options.clients <= 0) return InvalidArgumentError("--clients must be positive");
  if (options.mode == "sync" && options.sync.clients_per_round > options.clients) {
    return InvalidArgumentError("--clients-per-round (" + std::to_string(options.sync.clients_per_round) +
                                ") exceeds --clients (" + std::to_string(options.clients) + ")");
  }
  PLEXUS_RETURN_IF_ERROR(options.speeds.Validate());
  PLEXUS_ASSIGN_OR_RETURN(AttackKind attack, ParseAttack(options.attack));
  if (!(options.attackers >= 0.0 && options.attackers < 1.0)) {
    return InvalidArgumentError("--attackers must lie in [0, 1)");
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  PLEXUS_ASSIGN_OR_RETURN(ModelState initial, InitModel(options.model, options.seed));
  PLEXUS_ASSIGN_OR_RETURN(std::vector<std::vector<uint32_t>> parts,
                          PartitionIndices(train.labels, options.partition, options.clients, options.seed));
  ManualClock clock;
  MemoryStore store;
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, OpenEngine(options, initial, &store, &clock, evaluator));

  const size_t n = static_cast<size_t>(options.clients);
  const std::vector<double> ms_per_step = options.speeds.Assign(n, options.seed);
  std::vector<std::string> ids(n);
  for (size_t i = 0; i < n; ++i) {
    char name[32];
    std::snprintf(name, sizeof name, "sim-%07zu", i);
    PLEXUS_ASSIGN_OR_RETURN(ids[i], engine->Join({name, static_cast<int64_t>(parts[i].size()), "virtual"}));
  }

  // The malicious clients: a seeded choice of round(attackers x N).
  std::vector<bool> malicious(n, false);
  {
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    Rng pick = Rng::Derive(options.seed, 0xbadc0deULL);
    pick.Shuffle(std::span<size_t>(order));
    const auto count = attack == AttackKind::kNone ? 0 : static_cast<size_t>(std::llround(options.attackers * n));
    for (size_t i = 0; i < count; ++i) malicious[order[i]] = true;
  }
  const size_t per_round = options.mode == "sync" ? static_cast<size_t>(options.sync.clients_per_round) : n;
  const double alie_z =
      AlieZ(per_round, static_cast<size_t>(std::llround(options.attackers * static_cast<double>(per_round))));
  std::map<uint64_t, HonestStats> honest;  // by base version: what omniscient attackers see

  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  uint64_t seq = 0;
  for (size_t i = 0; i < n; ++i) events.push({0, seq++, i, false});
  std::vector<std::optional<Update>> in_flight(n);
  std::vector<uint64_t> tasks_of(n, 0);

  SimResult result;
  result.strategy = engine->strategy_description();
  result.attackers = std::count(malicious.begin(), malicious.end(), true);
  size_t reported = engine->history().size();
  auto report_new_versions = [&] {
    for (; reported < engine->history().size(); ++reported) {
      SimRound r{engine->history()[reported], elapsed(), static_cast<double>(clock.NowMs()) / 1000.0};
      result.rounds.push_back(r);
      if (on_round) on_round(r);
    }
  };

  int64_t next_tick_ms = 0;
  while (!engine->finished()) {
    const bool budget_spent = options.max_tasks > 0 && result.tasks_trained >= options.max_tasks;
    if (events.empty()) {
      if (budget_spent) break;
      return InternalError("simulation: every client stopped before the federation finished");
    }
    const Event e = events.top();
    events.pop();
    for (; next_tick_ms <= e.at_ms && !engine->finished(); next_tick_ms += kTickMs) {
      clock.SetMs(next_tick_ms);
      PLEXUS_RETURN_IF_ERROR(engine->Tick());
      report_new_versions();
    }
    if (engine->finished()) break;
    clock.SetMs(e.at_ms);
    const size_t i = e.client;
    if (e.finish) {
      if (malicious[i]) {
        Rng rng = Rng::Derive(options.seed ^ 0xa77acULL, i * 1000003ULL + tasks_of[i]);
        ApplyAttack(attack, honest[in_flight[i]->base_version], alie_z, rng, in_flight[i]->delta);
      }
      Status s = engine->Submit(*in_flight[i]);
      in_flight[i].reset();
      if (!s.ok()) {
        // Expected in a federation (too stale, the round closed without it); anything else is a bug.
        if (s.code() != StatusCode::kFailedPrecondition && s.code() != StatusCode::kNotFound) {
          return s.WithContext("simulated client " + ids[i]);
        }
        ++result.updates_refused;
      }
      report_new_versions();
      events.push({e.at_ms, seq++, i, false});
      continue;
    }
    if (budget_spent) continue;  // the client stops
    PLEXUS_ASSIGN_OR_RETURN(PollAnswer a, engine->Poll(ids[i]));
    if (a.kind == PollAnswer::Kind::kWait) {
      events.push({e.at_ms + std::max<int64_t>(1, a.retry_after_ms), seq++, i, false});
      continue;
    }
    if (a.kind != PollAnswer::Kind::kTask) continue;  // finished: the client stops
    const ModelState& base = engine->model();
    if (base.version() != a.task.model_version) {
      return InternalError("simulation: task " + a.task.task_id + " names a version other than the current model");
    }
    if (options.speeds.dropout > 0 &&
        Rng::Derive(options.seed ^ 0xd40bULL, i * 1000003ULL + tasks_of[i]).Uniform() < options.speeds.dropout) {
      // The device drops the task: silent for as long as it would have worked, then back.
      ++tasks_of[i];
      ++result.tasks_dropped;
      const TaskHyperparams& hp = a.task.hyperparams;
      const auto batches = static_cast<int64_t>((parts[i].size() + static_cast<size_t>(hp.batch_size) - 1) /
                                                static_cast<size_t>(hp.batch_size));
      const int64_t steps = hp.local_steps > 0 ? hp.local_steps : hp.local_epochs * batches;
      const auto silent_ms = static_cast<int64_t>(std::llround(static_cast<double>(steps) * ms_per_step[i])) +
                             options.speeds.task_overhead_ms;
      events.push({e.at_ms + std::max<int64_t>(1, silent_ms), seq++, i, false});
      continue;
    }
    DatasetView view{&train, parts[i]};
    const uint64_t batch_seed = Rng::Derive(options.seed ^ (0x51ULL << 56), i * 1000003ULL + tasks_of[i]++).NextU64();
    PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, trainer->Train(base, view, TrainOptionsFor(a.task.hyperparams, batch_seed)));
    ++result.tasks_trained;
    Update u;
    u.client_id = ids[i];
    u.task_id = a.task.task_id;
    u.base_version = a.task.model_version;
    u.num_examples = out.num_examples;
    u.local_steps = out.steps;
    u.metrics["train_loss"] = out.mean_loss;
    u.delta = std::move(out.weights);
    u.delta.Subtract(base);
    if (!malicious[i] && attack != AttackKind::kNone) {
      honest[base.version()].Add(u.delta.data());
      while (honest.size() > 32) honest.erase(honest.begin());  // versions long gone
    }
    in_flight[i] = std::move(u);
    const auto busy_ms = static_cast<int64_t>(std::llround(static_cast<double>(out.steps) * ms_per_step[i])) +
                         options.speeds.task_overhead_ms;
    events.push({e.at_ms + std::max<int64_t>(1, busy_ms), seq++, i, true});
  }
  report_new_versions();
  result.final_model = engine->model();
  result.model_version = result.final_model.version();
  result.final_model_sha256 = result.final_model.ContentSha256();
  if (!result.rounds.empty() && result.rounds.back().record.test_accuracy) {
    result.final_test_accuracy = *result.rounds.back().record.test_accuracy;
    result.final_test_loss = *result.rounds.back().record.test_loss;
  }
  result.wall_time_s = elapsed();
  result.virtual_time_s = static_cast<double>(clock.NowMs()) / 1000.0;
  return result;
}

}  // namespace plexus
