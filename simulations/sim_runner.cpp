#include "simulations/sim_runner.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
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

Result<DeviceModel> DeviceModel::Profile(const std::string& name) {
  if (name == "uniform") return DeviceModel{};
  if (name == "heterogeneous") {
    return DeviceModel{.ms_per_step = 25.0, .speed_sigma = 0.8, .task_overhead_ms = 20, .latency_ms = 50.0,
                       .down_mbps = 50.0, .up_mbps = 10.0, .dropout = 0.05};
  }
  if (name == "mobile") {
    return DeviceModel{.ms_per_step = 60.0, .speed_sigma = 1.0, .task_overhead_ms = 50, .latency_ms = 100.0,
                       .down_mbps = 10.0, .up_mbps = 2.0, .dropout = 0.1, .mean_on_s = 600.0, .mean_off_s = 300.0};
  }
  return InvalidArgumentError("unknown device profile '" + name + "' (known: uniform, heterogeneous, mobile)");
}

Status DeviceModel::Validate() const {
  if (!(dropout >= 0 && dropout < 1)) return InvalidArgumentError("dropout must lie in [0, 1)");
  if (!(ms_per_step > 0)) return InvalidArgumentError("ms-per-step must be positive");
  if (!(speed_ratio >= 1)) return InvalidArgumentError("speed-ratio must be at least 1");
  if (!(speed_sigma >= 0 && speed_sigma <= 5)) return InvalidArgumentError("speed-sigma must lie in [0, 5]");
  if (task_overhead_ms < 0) return InvalidArgumentError("task-overhead-ms must not be negative");
  if (!(latency_ms >= 0)) return InvalidArgumentError("latency-ms must not be negative");
  if (!(down_mbps >= 0) || !(up_mbps >= 0)) return InvalidArgumentError("down-mbps and up-mbps must not be negative (0 = unlimited)");
  if (!(mean_on_s >= 0) || !(mean_off_s >= 0) || ((mean_on_s > 0) != (mean_off_s > 0))) {
    return InvalidArgumentError("mean-on-s and mean-off-s must both be positive (or both 0 for always available)");
  }
  return Status::Ok();
}

std::vector<double> DeviceModel::Assign(size_t n, uint64_t seed) const {
  std::vector<double> out(n);
  if (speed_sigma > 0) {
    for (size_t i = 0; i < n; ++i) {
      out[i] = ms_per_step * std::exp(speed_sigma * Rng::Derive(seed ^ 0x5beedULL, i).Normal());
    }
    return out;
  }
  std::vector<size_t> rank(n);
  std::iota(rank.begin(), rank.end(), size_t{0});
  Rng rng = Rng::Derive(seed, 0x5beedULL);
  rng.Shuffle(std::span<size_t>(rank));
  for (size_t i = 0; i < n; ++i) {
    const double position = n > 1 ? static_cast<double>(rank[i]) / static_cast<double>(n - 1) : 0.0;
    out[i] = ms_per_step * std::pow(speed_ratio, position);
  }
  return out;
}

double DeviceModel::TaskMs(int64_t steps, double step_ms, size_t model_bytes) const {
  const double megabits = static_cast<double>(model_bytes) * 8.0 / 1e6;
  double ms = static_cast<double>(steps) * step_ms + static_cast<double>(task_overhead_ms) + 2.0 * latency_ms;
  if (down_mbps > 0) ms += megabits / down_mbps * 1000.0;
  if (up_mbps > 0) ms += megabits / up_mbps * 1000.0;
  return ms;
}

namespace {

// Each client's alternating on/off process, advanced lazily: exponential periods drawn from the
// client's own seeded stream, so the schedule does not depend on what else happens.
class Availability {
 public:
  Availability(const DeviceModel& d, size_t n, uint64_t seed)
      : on_ms_(d.mean_on_s * 1000.0), off_ms_(d.mean_off_s * 1000.0), seed_(seed) {
    if (on_ms_ <= 0) return;
    clients_.resize(n);
    for (size_t i = 0; i < n; ++i) {
      State& c = clients_[i];
      c.on = Draw(i, c).Uniform() < on_ms_ / (on_ms_ + off_ms_);  // the stationary share
      c.next_switch_ms = Period(i, c);  // memoryless: the residual period has the same law
    }
  }
  bool always_on() const { return clients_.empty(); }
  // Whether client i is on at `now`; `until` receives when that ends.
  bool On(size_t i, int64_t now, int64_t* until) {
    State& c = clients_[i];
    while (c.next_switch_ms <= now) {
      c.on = !c.on;
      c.next_switch_ms += Period(i, c);
    }
    *until = c.next_switch_ms;
    return c.on;
  }

 private:
  struct State {
    int64_t next_switch_ms = 0;
    uint32_t draws = 0;
    bool on = true;
  };
  Rng Draw(size_t i, State& c) const { return Rng::Derive(seed_ ^ 0xa7a11ULL, i * 1000003ULL + c.draws++); }
  int64_t Period(size_t i, State& c) const {
    const double mean = c.on ? on_ms_ : off_ms_;
    return std::max<int64_t>(1, std::llround(-mean * std::log1p(-Draw(i, c).Uniform())));
  }

  const double on_ms_, off_ms_;
  const uint64_t seed_;
  std::vector<State> clients_;
};

// Where each client's examples come from: a split of the data (materialised once; its total
// size is the data's) or, for populations larger than the data, samples drawn on demand.
class ClientData {
 public:
  static Result<ClientData> Make(const SimOptions& o, const Dataset& train) {
    ClientData d;
    int64_t k = o.examples_per_client;
    if (k == 0 && static_cast<int64_t>(train.size()) < 10 * o.clients) k = 50;
    if (k > 0) {
      PLEXUS_ASSIGN_OR_RETURN(SampledPartition s, SampledPartition::Make(train.labels, o.partition, k, o.seed));
      d.sampled_.emplace(std::move(s));
    } else {
      PLEXUS_ASSIGN_OR_RETURN(d.parts_, PartitionIndices(train.labels, o.partition, o.clients, o.seed));
    }
    return d;
  }
  int64_t examples(size_t i) const {
    return sampled_ ? sampled_->examples_per_client() : static_cast<int64_t>(parts_[i].size());
  }
  std::vector<uint32_t> Indices(size_t i) const { return sampled_ ? sampled_->For(i) : parts_[i]; }
  int64_t sampled_examples() const { return sampled_ ? sampled_->examples_per_client() : 0; }

 private:
  std::optional<SampledPartition> sampled_;
  std::vector<std::vector<uint32_t>> parts_;
};

std::string ClientName(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "sim-%07zu", i);
  return name;
}

}  // namespace

Status SimOptions::Validate() const {
  if (clients <= 0) return InvalidArgumentError("--clients must be positive");
  if (mode != "sync" && mode != "async" && mode != "semiasync") {
    return InvalidArgumentError("unknown mode '" + mode + "' (sync, async or semiasync)");
  }
  if (mode == "sync" && sync.clients_per_round > clients) {
    return InvalidArgumentError("--clients-per-round (" + std::to_string(sync.clients_per_round) +
                                ") exceeds --clients (" + std::to_string(clients) + ")");
  }
  if (examples_per_client < 0) return InvalidArgumentError("--examples-per-client must not be negative");
  PLEXUS_RETURN_IF_ERROR(devices.Validate());
  PLEXUS_RETURN_IF_ERROR(ParseAttack(attack).status());
  if (!(attackers >= 0.0 && attackers < 1.0)) return InvalidArgumentError("--attackers must lie in [0, 1)");
  return Status::Ok();
}

Result<SimResult> RunSimulation(const SimOptions& options, const Dataset& train, TaskRunner* runner,
                                ModelEvaluator* evaluator, const std::function<void(const SimRound&)>& on_round) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  const DeviceModel& dev = options.devices;
  const AttackKind attack = *ParseAttack(options.attack);
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };

  PLEXUS_ASSIGN_OR_RETURN(ModelState initial, InitModel(options.model, options.seed));
  PLEXUS_ASSIGN_OR_RETURN(ClientData data, ClientData::Make(options, train));
  ManualClock clock;
  MemoryStore store(/*keep_recovery_data=*/false);
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, OpenEngine(options, initial, &store, &clock, evaluator));

  const size_t n = static_cast<size_t>(options.clients);
  const size_t model_bytes = initial.num_params() * sizeof(float);
  const std::vector<double> ms_per_step = dev.Assign(n, options.seed);
  Availability availability(dev, n, options.seed);
  for (size_t i = 0; i < n; ++i) {
    PLEXUS_ASSIGN_OR_RETURN(std::string id, engine->Join({ClientName(i), data.examples(i), "virtual"}));
    if (id != ClientName(i)) return InternalError("simulation: the engine renamed client " + ClientName(i));
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
  // A task on its way: its training job is started at hand-out and finished when its device
  // would be done (the runner decides when and where it trains). Omniscient attacks (ipm, alie, minmax)
  // need every honest update of a version as soon as it is handed out, and finish at once.
  struct InFlight {
    Task task;
    std::shared_ptr<const ModelState> base;
    std::optional<Update> update;  // once trained
  };
  const bool train_at_handout =
      attack == AttackKind::kIpm || attack == AttackKind::kAlie || attack == AttackKind::kMinMax;
  std::map<size_t, InFlight> in_flight;
  std::shared_ptr<const ModelState> current_base;  // shared by the tasks handed out on it
  int64_t handed_out = 0;
  std::vector<uint32_t> tasks_of(n, 0);
  std::vector<uint32_t> parked;             // told to wait; they poll again when the epoch moves
  uint64_t parked_epoch = engine->poll_epoch();
  const int64_t client_timeout_ms = options.mode == "sync" ? options.sync.client_timeout_ms : options.async.client_timeout_ms;
  const int64_t wave_ms = std::max<int64_t>(kTickMs, client_timeout_ms / 2);
  int64_t next_wave_ms = wave_ms;
  auto wake_parked = [&](int64_t now) {
    for (uint32_t i : parked) events.push({now, seq++, i, false});
    parked.clear();
    parked_epoch = engine->poll_epoch();
  };
  auto wake_if_epoch_moved = [&](int64_t now) {
    if (engine->poll_epoch() != parked_epoch) wake_parked(now);
  };

  SimResult result;
  result.strategy = engine->strategy_description();
  result.attackers = std::count(malicious.begin(), malicious.end(), true);
  result.examples_per_client = data.sampled_examples();
  int64_t bytes_down = 0, bytes_up = 0;
  auto finish_task = [&](size_t i, const InFlight& f) -> Result<Update> {
    PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, runner->Finish(i));
    ++result.tasks_trained;
    Update u;
    u.client_id = ClientName(i);
    u.task_id = f.task.task_id;
    u.base_version = f.task.model_version;
    u.num_examples = out.num_examples;
    u.local_steps = out.steps;
    u.metrics["train_loss"] = out.mean_loss;
    u.delta = std::move(out.weights);
    u.delta.Subtract(*f.base);
    if (!malicious[i] && train_at_handout) {
      honest.try_emplace(f.base->version(), /*keep_updates=*/attack == AttackKind::kMinMax)
          .first->second.Add(u.delta.data());
      while (honest.size() > 32) honest.erase(honest.begin());  // versions long gone
    }
    return u;
  };
  size_t reported = engine->history().size();
  auto report_new_versions = [&] {
    for (; reported < engine->history().size(); ++reported) {
      SimRound r{engine->history()[reported], elapsed(), static_cast<double>(clock.NowMs()) / 1000.0, bytes_down,
                 bytes_up};
      result.rounds.push_back(r);
      if (on_round) on_round(r);
    }
  };

  // Engine deadlines fire from ticks; a tick may also move the epoch, and every half client
  // timeout the parked clients poll anyway (so that they stay connected).
  int64_t next_tick_ms = 0;
  // Runs the ticks up to `until_ms`, stopping early after one that woke parked clients (their
  // polls come first).
  auto tick_through = [&](int64_t until_ms) -> Status {
    while (next_tick_ms <= until_ms && !engine->finished()) {
      const int64_t now = next_tick_ms;
      next_tick_ms += kTickMs;
      clock.SetMs(now);
      PLEXUS_RETURN_IF_ERROR(engine->Tick());
      report_new_versions();
      const size_t woken = parked.size();
      if (now >= next_wave_ms) {
        next_wave_ms += wave_ms;
        wake_parked(now);
      }
      wake_if_epoch_moved(now);
      if (woken > 0 && parked.empty()) break;
    }
    return Status::Ok();
  };
  while (!engine->finished()) {
    const bool budget_spent = options.max_tasks > 0 && handed_out >= options.max_tasks;
    if (events.empty() && !parked.empty() && !budget_spent) {
      PLEXUS_RETURN_IF_ERROR(tick_through(next_tick_ms));  // nobody busy: wait for a tick's news
      continue;
    }
    if (events.empty()) {
      if (budget_spent) break;
      return InternalError("simulation: every client stopped before the federation finished");
    }
    const int64_t at_ms = events.top().at_ms;
    PLEXUS_RETURN_IF_ERROR(tick_through(at_ms));
    if (engine->finished()) break;
    if (events.top().at_ms < at_ms) continue;  // a tick woke clients before this event
    const Event e = events.top();
    events.pop();
    if (engine->finished()) break;
    clock.SetMs(e.at_ms);
    const size_t i = e.client;
    if (e.finish) {
      auto it = in_flight.find(i);
      if (!it->second.update) {
        PLEXUS_ASSIGN_OR_RETURN(Update trained, finish_task(i, it->second));
        it->second.update = std::move(trained);
      }
      Update& u = *it->second.update;
      if (malicious[i]) {
        Rng rng = Rng::Derive(options.seed ^ 0xa77acULL, i * 1000003ULL + tasks_of[i]);
        ApplyAttack(attack, honest[u.base_version], alie_z, rng, u.delta);
      }
      Status s = engine->Submit(u);
      in_flight.erase(it);
      bytes_up += static_cast<int64_t>(model_bytes);
      if (!s.ok()) {
        // Expected in a federation (too stale, the round closed without it); anything else is a bug.
        if (s.code() != StatusCode::kFailedPrecondition && s.code() != StatusCode::kNotFound) {
          return s.WithContext("simulated client " + ClientName(i));
        }
        ++result.updates_refused;
      }
      report_new_versions();
      wake_if_epoch_moved(e.at_ms);
      events.push({e.at_ms, seq++, i, false});
      continue;
    }
    if (budget_spent) continue;  // the client stops
    int64_t on_until = INT64_MAX;
    if (!availability.always_on() && !availability.On(i, e.at_ms, &on_until)) {
      events.push({on_until, seq++, i, false});  // off: back when the next on period starts
      continue;
    }
    PLEXUS_ASSIGN_OR_RETURN(PollAnswer a, engine->Poll(ClientName(i)));
    if (a.kind == PollAnswer::Kind::kWait) {
      wake_if_epoch_moved(e.at_ms);  // e.g. this very poll opened a round
      parked.push_back(static_cast<uint32_t>(i));
      continue;
    }
    if (a.kind != PollAnswer::Kind::kTask) continue;  // finished: the client stops
    wake_if_epoch_moved(e.at_ms);
    const ModelState& base = engine->model();
    if (base.version() != a.task.model_version) {
      return InternalError("simulation: task " + a.task.task_id + " names a version other than the current model");
    }
    bytes_down += static_cast<int64_t>(model_bytes);
    const TaskHyperparams& hp = a.task.hyperparams;
    const int64_t examples = data.examples(i);
    const int64_t batches = (examples + hp.batch_size - 1) / hp.batch_size;
    const int64_t planned_steps = hp.local_steps > 0 ? hp.local_steps : hp.local_epochs * batches;
    const auto planned_ms = static_cast<int64_t>(std::llround(dev.TaskMs(planned_steps, ms_per_step[i], model_bytes)));
    const bool drops = dev.dropout > 0 &&
                       Rng::Derive(options.seed ^ 0xd40bULL, i * 1000003ULL + tasks_of[i]).Uniform() < dev.dropout;
    if (drops || e.at_ms + planned_ms > on_until) {
      // The device abandons the task (or goes off first): silent for as long as it would have
      // worked, or until it is back on, then it polls again.
      ++tasks_of[i];
      ++result.tasks_dropped;
      const int64_t back = drops ? e.at_ms + std::max<int64_t>(1, planned_ms) : on_until;
      events.push({std::max(back, e.at_ms + 1), seq++, i, false});
      continue;
    }
    if (!current_base || current_base->version() != base.version()) {
      current_base = std::make_shared<const ModelState>(base);
    }
    const uint64_t batch_seed = Rng::Derive(options.seed ^ (0x51ULL << 56), i * 1000003ULL + tasks_of[i]++).NextU64();
    PLEXUS_RETURN_IF_ERROR(runner->Start(i, {current_base, data.Indices(i), malicious[i] && attack == AttackKind::kLabelFlip,
                                             TrainOptionsFor(a.task.hyperparams, batch_seed)}));
    InFlight f{a.task, current_base, std::nullopt};
    ++handed_out;
    if (train_at_handout) {
      PLEXUS_ASSIGN_OR_RETURN(Update trained, finish_task(i, f));
      f.update = std::move(trained);
    }
    in_flight[i] = std::move(f);
    events.push({e.at_ms + std::max<int64_t>(1, planned_ms), seq++, i, true});
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
