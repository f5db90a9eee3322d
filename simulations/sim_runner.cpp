#include "simulations/sim_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <thread>
#include <unordered_map>

#include "client/client_session.h"
#include "client/secure_member_session.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "compute/model_zoo.h"
#include "core/clock.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "privacy/gaussian_noise.h"
#include "server/coordinator/engine_factory.h"
#include "server/store/memory_store.h"
#include "simulations/attack.h"
#include "simulations/client_data.h"
#include "simulations/event_network.h"

namespace plexus {
namespace {

constexpr int64_t kTickMs = 100;

// The engine of the run's mode, through the factory the server uses too, with the simulator's
// seed and its tick as the poll retry.
Result<std::unique_ptr<Engine>> OpenSimEngine(const SimOptions& o, const ModelState& initial, Store* store,
                                              const Clock* clock, ModelEvaluator* evaluator, ThreadPool* pool) {
  EngineOptions options{o.mode, o.sync, o.async};
  options.sync.seed = o.seed;
  options.sync.poll_retry_ms = kTickMs;
  static_cast<SharedEngineOptions&>(options.async) = options.sync;  // the shared flags bind into sync
  return OpenEngine(options, initial, store, clock, evaluator, pool);
}

std::string ClientName(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "sim-%07zu", i);
  return name;
}

}  // namespace

namespace {

// One federation in virtual time, on an EventNetwork: node 0 is the server, node i + 1 client i
// (with the device's latency and bandwidth; the server's link per SimOptions::server_mbps). A
// task is a model download (a message from the server), the local steps (a timer) and the update
// upload (a message to the server); the update is submitted when its last byte arrives. Engine
// deadlines fire from a tick every 100 virtual ms. Handlers capture `this` and a client index
// only, so an event costs no allocation.
class FederationSim {
 public:
  FederationSim(const SimOptions& o, const Dataset& train, TaskRunner* runner, ClientData data, Engine* engine,
                ManualClock* clock, size_t model_bytes, const std::function<void(const SimRound&)>& on_round)
      : o_(o),
        dev_(o.devices),
        attack_spec_(*ParseAttackSpec(o.attack)),
        attack_(attack_spec_.kind),
        train_(train),
        runner_(runner),
        data_(std::move(data)),
        engine_(engine),
        clock_(clock),
        model_bytes_(model_bytes),
        codec_(o.codec.empty() ? nullptr : *MakeCodec(o.codec)),
        coded_downloads_(o.download_codec.empty() ? nullptr : *CodedDownloads::Create(o.download_codec)),
        on_round_(on_round),
        n_(static_cast<size_t>(o.clients)),
        ms_per_step_(dev_.Assign(n_, o.seed)),
        availability_(dev_, n_, o.seed),
        train_at_handout_(attack_ == AttackKind::kIpm || attack_ == AttackKind::kAlie ||
                          attack_ == AttackKind::kMinMax),
        tasks_of_(n_, 0) {
    net_.AddNode({0.0, o.server_mbps, o.server_mbps});
    for (size_t i = 0; i < n_; ++i) {
      const double f = dev_.BandwidthFactor(i, o.seed);
      net_.AddNode({dev_.latency_ms, dev_.up_mbps * f, dev_.down_mbps * f});
    }
    malicious_ = ChooseAttackers(attack_, o.attackers, n_, o.seed);
    const size_t per_round = o.mode == Mode::kSync ? static_cast<size_t>(o.sync.clients_per_round) : n_;
    alie_z_ = AlieZ(per_round, static_cast<size_t>(std::llround(o.attackers * static_cast<double>(per_round))));
    const int64_t timeout_ms = o.mode == Mode::kSync ? o.sync.client_timeout_ms : o.async.client_timeout_ms;
    wave_ms_ = std::max<int64_t>(kTickMs, timeout_ms / 2);
    next_wave_ms_ = static_cast<double>(wave_ms_);
    parked_epoch_ = engine_->poll_epoch();
    reported_ = engine_->history().size();
    upload_bytes_ = codec_ ? codec_->EncodedSize(engine_->model()) : model_bytes_;
    session_options_.seed = o.seed;
  }

  Result<SimResult> Run() {
    start_ = std::chrono::steady_clock::now();
    result_.strategy = engine_->strategy_description();
    result_.attackers = std::count(malicious_.begin(), malicious_.end(), true);
    result_.examples_per_client = data_.sampled_examples();
    net_.After(0.0, [this] { Tick(); });  // ticks first at equal times: deadlines before polls
    for (size_t i = 0; i < n_; ++i) Schedule(0.0, i);
    net_.Run();
    PLEXUS_RETURN_IF_ERROR(failure_);
    ReportNewVersions();
    result_.final_model = engine_->model();
    result_.model_version = result_.final_model.version();
    result_.final_model_sha256 = result_.final_model.ContentSha256();
    if (!result_.rounds.empty() && result_.rounds.back().record.test_accuracy) {
      result_.final_test_accuracy = *result_.rounds.back().record.test_accuracy;
      result_.final_test_loss = *result_.rounds.back().record.test_loss;
    }
    result_.wall_time_s = Elapsed();
    result_.virtual_time_s = net_.now_ms() / 1000.0;
    if (o_.sync.secagg) {
      SimResult::SecureAggregation& st = SecureStats();
      // Members whose round was published when the run ended never heard so (the run stopped).
      for (const auto& [i, m] : secure_) {
        if (m.session && m.task.round <= engine_->model().version()) CountFinished(m);
      }
      st.groups_done = static_cast<int64_t>(engine_->history().size());
      st.groups_aborted = engine_->status().secure_rounds_aborted;
      if (st.members_done > 0) {
        const auto n = static_cast<double>(st.members_done);
        st.member_cpu_ms /= n;
        st.key_bytes_per_member /= n;
        st.masked_bytes_per_member /= n;
      }
    }
    return std::move(result_);
  }

 private:
  // A task on its way: its training job was started at hand-out and is finished when its upload
  // arrives (the runner decides when and where it trains). Omniscient attacks (ipm, alie,
  // minmax) need every honest update of a version as soon as it is handed out, and finish at once.
  struct InFlight {
    Task task;
    std::shared_ptr<const ModelState> base;
    std::optional<Update> update;  // once trained
  };

  EventNetwork::NodeId Node(size_t i) const { return static_cast<EventNetwork::NodeId>(i + 1); }
  double Elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  bool BudgetSpent() const { return o_.max_tasks > 0 && handed_out_ >= o_.max_tasks; }
  // Client i polls `delay_ms` from now.
  void Schedule(double delay_ms, size_t i) {
    ++pending_;
    net_.After(delay_ms, [this, i] {
      --pending_;
      Guard(ClientPolls(i));
    });
  }
  // Every handler ends here: an error stops the run, as does the end of the federation.
  void Guard(const Status& s) {
    if (!s.ok() && failure_.ok()) failure_ = s;
    if (!s.ok() || engine_->finished()) net_.Stop();
  }
  void SetClock() { clock_->SetMs(std::llround(net_.now_ms())); }
  int64_t now_ms() const { return std::llround(net_.now_ms()); }
  // Client i's session, made when it has none (a session at rest is dropped: a new one decides
  // the same).
  ClientSession& SessionOf(size_t i) {
    return sessions_.try_emplace(static_cast<uint32_t>(i), session_options_, ClientName(i)).first->second;
  }

  void WakeParked() {
    for (uint32_t i : parked_) Schedule(0.0, i);
    parked_.clear();
    parked_epoch_ = engine_->poll_epoch();
  }
  void WakeIfEpochMoved() {
    if (engine_->poll_epoch() != parked_epoch_) WakeParked();
  }
  void ReportNewVersions() {
    if (o_.sync.secagg && reported_ < engine_->history().size()) {
      SecureStats().unmask_ms_max = std::max(SecureStats().unmask_ms_max, engine_->status().last_secure_unmask_ms);
    }
    for (; reported_ < engine_->history().size(); ++reported_) {
      SimRound r{engine_->history()[reported_], Elapsed(), net_.now_ms() / 1000.0, bytes_down_, bytes_up_};
      result_.rounds.push_back(r);
      if (on_round_) on_round_(r);
    }
  }

  // Engine deadlines fire from ticks; a tick may also move the epoch, and every half client
  // timeout the parked clients poll anyway (so that they stay connected).
  void Tick() {
    if (engine_->finished()) return net_.Stop();
    SetClock();
    const auto began = std::chrono::steady_clock::now();
    if (Status s = engine_->Tick(); !s.ok()) return Guard(s);
    if (o_.sync.secagg) NoteServerCall(began);  // a stage's deadline may unmask
    ReportNewVersions();
    if (net_.now_ms() >= next_wave_ms_) {
      next_wave_ms_ += static_cast<double>(wave_ms_);
      WakeParked();
    }
    WakeIfEpochMoved();
    if (engine_->finished()) return net_.Stop();
    if (pending_ == 0 && parked_.empty() && !BudgetSpent()) {
      return Guard(InternalError("simulation: every client stopped before the federation finished"));
    }
    if (pending_ == 0 && BudgetSpent()) return net_.Stop();  // the budget is spent and nothing is under way
    net_.After(static_cast<double>(kTickMs), [this] { Tick(); });
  }

  Status ClientPolls(size_t i) {
    if (engine_->finished() || BudgetSpent()) return Status::Ok();  // the client stops
    const double now = net_.now_ms();
    double on_until = std::numeric_limits<double>::infinity();
    if (!availability_.always_on()) {
      int64_t until = 0;
      const bool on = availability_.On(i, static_cast<int64_t>(std::ceil(now)), &until);
      if (!on) {
        Schedule(static_cast<double>(until) - now, i);  // off: back when the next on period starts
        return Status::Ok();
      }
      on_until = static_cast<double>(until);
    }
    SetClock();
    PLEXUS_ASSIGN_OR_RETURN(PollAnswer a, engine_->Poll(ClientName(i)));
    ClientSession& session = SessionOf(i);
    const ClientStep step = session.PollAnswered(a, now_ms());
    switch (step.kind) {
      case ClientStep::Kind::kTrain:
        break;
      case ClientStep::Kind::kDone:  // finished: the client stops
        sessions_.erase(i);
        return Status::Ok();
      case ClientStep::Kind::kPoll:
        if (step.pause == ClientStep::Pause::kServerSaidWait) {
          // A long poll: parked until the engine's state moves.
          WakeIfEpochMoved();  // e.g. this very poll opened a round
          parked_.push_back(static_cast<uint32_t>(i));
        } else {
          if (step.pause == ClientStep::Pause::kRefusedTask) ++result_.waits_after_refusals;
          Schedule(static_cast<double>(step.after_ms), i);
        }
        if (session.at_rest()) sessions_.erase(i);
        return Status::Ok();
      default:
        return InternalError("simulation: client " + ClientName(i) + " cannot take the engine's answer: " +
                             (step.kind == ClientStep::Kind::kEvaluate ? "federated evaluation is not simulated"
                                                                       : step.error.ToString()));
    }
    const Task& task = step.task;
    WakeIfEpochMoved();
    const ModelState& base = engine_->model();
    if (base.version() != task.model_version) {
      return InternalError("simulation: task " + task.task_id + " names a version other than the current model");
    }
    if (!current_base_ || current_base_->version() != base.version()) {
      current_base_ = std::make_shared<const ModelState>(base);
    }
    // What the client trains from: the model, or with a download codec what it rebuilds from the
    // coded bytes (the change from its last download when the server still holds that one).
    std::shared_ptr<const ModelState> start = current_base_;
    size_t download_bytes = model_bytes_;
    if (coded_downloads_) {
      if (held_.empty()) held_.resize(n_);
      PLEXUS_ASSIGN_OR_RETURN(CodedDownloads::Download d, coded_downloads_->For(base, held_[i]));
      held_[i] = d.model_sha256;
      start = d.rebuilt;
      download_bytes = d.bytes->size();
    }
    bytes_down_ += static_cast<int64_t>(download_bytes);
    const TaskHyperparams& hp = task.hyperparams;
    const int64_t steps = hp.StepsFor(data_.examples(i));
    const double compute_ms = static_cast<double>(steps) * ms_per_step_[i] + static_cast<double>(dev_.task_overhead_ms);
    const double planned_ms = dev_.TaskMs(steps, ms_per_step_[i], model_bytes_, dev_.BandwidthFactor(i, o_.seed));
    const bool drops =
        dev_.dropout > 0 && Rng::Derive(o_.seed ^ 0xd40bULL, i * 1000003ULL + tasks_of_[i]).Uniform() < dev_.dropout;
    if (drops || now + planned_ms > on_until) {
      // The device abandons the task (or goes off first): silent for as long as it would have
      // worked, or until it is back on, then it polls again.
      ++tasks_of_[i];
      ++result_.tasks_dropped;
      const double back = drops ? now + std::max(1.0, planned_ms) : on_until;
      Schedule(std::max(back, now + 1.0) - now, i);
      return Status::Ok();
    }
    const uint64_t batch_seed = Rng::Derive(o_.seed ^ (0x51ULL << 56), i * 1000003ULL + tasks_of_[i]++).NextU64();
    if (o_.sync.secagg) return StartSecureTask(i, task, start, download_bytes, compute_ms, batch_seed);
    PLEXUS_RETURN_IF_ERROR(
        runner_->Start(i, {start, data_.Indices(i), malicious_[i] && attack_ == AttackKind::kLabelFlip,
                           TrainOptionsFor(task.hyperparams, batch_seed)}));
    InFlight f{task, start, std::nullopt};
    ++handed_out_;
    if (train_at_handout_) {
      PLEXUS_ASSIGN_OR_RETURN(Update trained, FinishTraining(i, f));
      f.update = std::move(trained);
    }
    in_flight_[i] = std::move(f);
    // Download, local steps, upload; the update is submitted when the upload has arrived.
    ++pending_;
    net_.Send(0, Node(i), download_bytes, [this, i, compute_ms] {
      net_.After(compute_ms, [this, i] {
        net_.Send(Node(i), 0, upload_bytes_, [this, i] {
          --pending_;
          Guard(UpdateArrives(i));
        });
      });
    });
    return Status::Ok();
  }

  Result<Update> FinishTraining(size_t i, const InFlight& f) {
    PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, runner_->Finish(i));
    ++result_.tasks_trained;
    Update u;
    u.client_id = ClientName(i);
    u.task_id = f.task.task_id;
    u.base_version = f.task.model_version;
    u.num_examples = out.num_examples;
    u.local_steps = out.steps;
    u.metrics["train_loss"] = out.mean_loss;
    u.delta = std::move(out.weights);
    u.delta.Subtract(*f.base);
    if (!malicious_[i] && train_at_handout_) {
      honest_.try_emplace(f.base->version(), /*keep_updates=*/attack_ == AttackKind::kMinMax)
          .first->second.Add(u.delta.data());
      while (honest_.size() > 32) honest_.erase(honest_.begin());  // versions long gone
    }
    return u;
  }

  Status UpdateArrives(size_t i) {
    if (engine_->finished()) return Status::Ok();
    SetClock();
    auto it = in_flight_.find(i);
    if (!it->second.update) {
      PLEXUS_ASSIGN_OR_RETURN(Update trained, FinishTraining(i, it->second));
      it->second.update = std::move(trained);
    }
    Update& u = *it->second.update;
    if (o_.local_dp_clip > 0 && !malicious_[i]) {  // as plexus client: before the update is encoded
      auto noise = MakeSeededGaussianNoise(Rng::Derive(o_.seed ^ 0x10ca1dULL, i * 1000003ULL + tasks_of_[i]).NextU64());
      PLEXUS_RETURN_IF_ERROR(ClipAndAddNoise(u.delta.data(), o_.local_dp_clip, o_.local_dp_noise, *noise)
                                 .WithContext("local DP on simulated client " + ClientName(i)));
      if (local_dp_releases_.empty()) local_dp_releases_.assign(n_, 0);
      result_.local_dp_most_releases = std::max(result_.local_dp_most_releases, ++local_dp_releases_[i]);
    }
    if (malicious_[i]) {
      Rng rng = Rng::Derive(o_.seed ^ 0xa77acULL, i * 1000003ULL + tasks_of_[i]);
      ApplyAttack(attack_spec_, honest_[u.base_version], alie_z_, rng, u.delta);
    }
    if (codec_) {  // what the server receives is what the codec kept
      ModelState* residual = nullptr;
      if (codec_->uses_residual()) residual = &residual_.try_emplace(i, ModelState::ZerosLike(u.delta)).first->second;
      const uint64_t seed = Rng::Derive(o_.seed ^ 0xc0deULL, i * 1000003ULL + tasks_of_[i]).NextU64();
      std::string bytes = codec_->Encode(u.delta, residual, seed);
      if (codec_->has_coded_form() && engine_->folds_coded()) {  // as the server: folded from the codes
        PLEXUS_ASSIGN_OR_RETURN(u.coded, codec_->Read(std::move(bytes), u.delta));
        u.delta = ModelState();
      } else {
        PLEXUS_ASSIGN_OR_RETURN(u.delta, codec_->Decode(bytes, u.delta));
      }
    }
    const std::string task_id = u.task_id;
    Status s = engine_->Submit(std::move(u));
    in_flight_.erase(it);
    bytes_up_ += static_cast<int64_t>(upload_bytes_);
    if (!s.ok()) {
      // Expected in a federation (too stale, the round closed without it); anything else is a bug.
      if (s.code() != StatusCode::kFailedPrecondition && s.code() != StatusCode::kNotFound) {
        return s.WithContext("simulated client " + ClientName(i));
      }
      ++result_.updates_refused;
    }
    ReportNewVersions();
    WakeIfEpochMoved();
    ClientSession& session = SessionOf(i);
    const ClientStep step = s.ok()
                                ? session.UploadAnswered(task_id, UploadAck{engine_->model().version(), {}}, now_ms())
                                : session.UploadAnswered(task_id, s, now_ms());
    if (step.kind != ClientStep::Kind::kPoll) {
      return InternalError("simulation: client " + ClientName(i) + " did not poll after its upload's answer");
    }
    if (step.pause == ClientStep::Pause::kRefusals) ++result_.waits_after_refusals;
    if (session.at_rest()) sessions_.erase(i);
    Schedule(static_cast<double>(step.after_ms), i);
    return Status::Ok();
  }

  // --- Secure aggregation: each virtual member runs plexus client's SecureMemberSession; its
  // calls and the server's answers travel the network with their payload's bytes, and the real
  // CPU each side spends is charged to it as virtual time before its next message goes out.
  struct SecureMember {
    Task task;
    std::shared_ptr<const ModelState> start;
    size_t download_bytes = 0;
    double compute_ms = 0;
    uint64_t batch_seed = 0;
    std::optional<SecureMemberSession> session;
    int drop_at = -1;  // the stage (secagg::Server::Stage) it goes silent at; -1: it stays
    double cpu_ms = 0;
  };

  SimResult::SecureAggregation& SecureStats() {
    if (!result_.secagg) result_.secagg.emplace();
    return *result_.secagg;
  }
  static double MsSince(std::chrono::steady_clock::time_point began) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
  }
  double NoteServerCall(std::chrono::steady_clock::time_point began) {
    const double ms = MsSince(began);
    SecureStats().server_call_ms_max = std::max(SecureStats().server_call_ms_max, ms);
    return ms;
  }

  Status StartSecureTask(size_t i, const Task& task, std::shared_ptr<const ModelState> start, size_t download_bytes,
                         double compute_ms, uint64_t batch_seed) {
    SecureMember m{task, std::move(start), download_bytes, compute_ms, batch_seed, std::nullopt, -1, 0.0};
    if (o_.secagg_dropout > 0) {
      Rng rng = Rng::Derive(o_.seed ^ 0x5ecd0ULL, i * 1000003ULL + tasks_of_[i]);
      if (rng.Uniform() < o_.secagg_dropout) m.drop_at = static_cast<int>(rng.Below(4));
    }
    ++handed_out_;
    secure_[i] = std::move(m);
    ++pending_;
    secagg::Call ask;
    ask.want_setup = true;
    SecureCall(i, std::move(ask), 0.0);
    return Status::Ok();
  }

  void SecureCall(size_t i, secagg::Call call, double delay_ms) {
    const int64_t bytes = PayloadBytes(call);
    bytes_up_ += bytes;
    auto shared = std::make_shared<const secagg::Call>(std::move(call));
    net_.After(delay_ms, [this, i, bytes, shared] {
      net_.Send(Node(i), 0, static_cast<uint64_t>(bytes), [this, i, shared] { Guard(SecureCallArrives(i, *shared)); });
    });
  }

  Status SecureCallArrives(size_t i, const secagg::Call& call) {
    if (engine_->finished()) return Status::Ok();
    SetClock();
    const auto began = std::chrono::steady_clock::now();
    Result<secagg::View> view = engine_->SecureAggregation(ClientName(i), secure_.at(i).task.task_id, call);
    const double server_ms = NoteServerCall(began);
    ReportNewVersions();
    WakeIfEpochMoved();
    if (!view.ok()) {
      // Refused: a stage closed without this member, or its round is gone. Anything else is a bug.
      const StatusCode code = view.status().code();
      if (code != StatusCode::kFailedPrecondition && code != StatusCode::kNotFound &&
          code != StatusCode::kInvalidArgument) {
        return view.status().WithContext("simulated member " + ClientName(i));
      }
      return EndSecureTask(i, view.status());
    }
    const int64_t bytes = PayloadBytes(*view);
    bytes_down_ += bytes;
    auto shared = std::make_shared<const secagg::View>(std::move(view).value());
    net_.After(server_ms, [this, i, bytes, shared] {
      net_.Send(0, Node(i), static_cast<uint64_t>(bytes), [this, i, shared] { Guard(SecureViewArrives(i, *shared)); });
    });
    return Status::Ok();
  }

  Status SecureViewArrives(size_t i, const secagg::View& view) {
    if (engine_->finished()) return Status::Ok();
    SecureMember& m = secure_.at(i);
    const auto began = std::chrono::steady_clock::now();
    if (!m.session) {
      if (!view.setup) return InternalError("simulation: the server sent member " + ClientName(i) + " no setup");
      PLEXUS_ASSIGN_OR_RETURN(SecureMemberSession session, SecureMemberSession::Create(*view.setup));
      m.session.emplace(std::move(session));
    }
    SecureAction next = m.session->Next(view);
    const double cpu = MsSince(began);
    m.cpu_ms += cpu;
    switch (next.kind) {
      case SecureAction::Kind::kSend:
        if (m.drop_at == static_cast<int>(next.stage)) return DropSecureMember(i);
        SecureCall(i, std::move(next.call), cpu);
        return Status::Ok();
      case SecureAction::Kind::kAskLater:
        SecureCall(i, secagg::Call{}, cpu + static_cast<double>(next.after_ms));
        return Status::Ok();
      case SecureAction::Kind::kTrain:
        // The model's download and the local steps, then the update goes into the session.
        PLEXUS_RETURN_IF_ERROR(
            runner_->Start(i, {m.start, data_.Indices(i), false, TrainOptionsFor(m.task.hyperparams, m.batch_seed)}));
        bytes_down_ += static_cast<int64_t>(m.download_bytes);
        net_.Send(0, Node(i), m.download_bytes,
                  [this, i] { net_.After(secure_.at(i).compute_ms, [this, i] { Guard(SecureTrained(i)); }); });
        return Status::Ok();
      case SecureAction::Kind::kDone:
        return EndSecureTask(i, Status::Ok());
      case SecureAction::Kind::kFail:
        return EndSecureTask(i, next.error);
    }
    return Status::Ok();
  }

  Status SecureTrained(size_t i) {
    if (engine_->finished()) return Status::Ok();
    SetClock();
    SecureMember& m = secure_.at(i);
    PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, runner_->Finish(i));
    ++result_.tasks_trained;
    ModelState delta = std::move(out.weights);
    delta.Subtract(*m.start);
    if (o_.local_dp_clip > 0) {  // as plexus client: before the update is encoded
      auto noise = MakeSeededGaussianNoise(Rng::Derive(o_.seed ^ 0x10ca1dULL, i * 1000003ULL + tasks_of_[i]).NextU64());
      PLEXUS_RETURN_IF_ERROR(ClipAndAddNoise(delta.data(), o_.local_dp_clip, o_.local_dp_noise, *noise)
                                 .WithContext("local DP on simulated client " + ClientName(i)));
      if (local_dp_releases_.empty()) local_dp_releases_.assign(n_, 0);
      result_.local_dp_most_releases = std::max(result_.local_dp_most_releases, ++local_dp_releases_[i]);
    }
    // The rounding's secret: the member's own (seeded here, so that runs repeat).
    Secret32 rounding{};
    Rng rng = Rng::Derive(o_.seed ^ 0x50a1dULL, i * 1000003ULL + tasks_of_[i]);
    for (size_t b = 0; b < rounding.size(); b += 8) {
      const uint64_t word = rng.NextU64();
      for (size_t k = 0; k < 8; ++k) rounding[b + k] = static_cast<uint8_t>(word >> (8 * k));
    }
    const auto began = std::chrono::steady_clock::now();
    const Status set = m.session->SetUpdate(delta.data(), out.num_examples, rounding);
    const double cpu = MsSince(began);
    m.cpu_ms += cpu;
    if (!set.ok()) return EndSecureTask(i, AbortedError(std::string(set.message())));  // e.g. diverged
    SecureCall(i, secagg::Call{}, cpu);
    return Status::Ok();
  }

  // A member whose update is in a published mean: its costs join the sums Run turns into means.
  void CountFinished(const SecureMember& m) {
    SimResult::SecureAggregation& st = SecureStats();
    ++st.members_done;
    st.member_cpu_ms += m.cpu_ms;
    st.member_cpu_ms_max = std::max(st.member_cpu_ms_max, m.cpu_ms);
    st.key_bytes_per_member += static_cast<double>(m.session->key_bytes());
    st.masked_bytes_per_member += static_cast<double>(m.session->masked_bytes());
  }

  // The member's task is over: in the published mean (OK) or not; it polls again as plexus client does.
  Status EndSecureTask(size_t i, const Status& outcome) {
    SecureMember m = std::move(secure_.at(i));
    secure_.erase(i);
    --pending_;
    SimResult::SecureAggregation& st = SecureStats();
    ClientSession& session = SessionOf(i);
    ClientStep step;
    if (outcome.ok()) {
      CountFinished(m);
      step = session.UploadAnswered(m.task.task_id, UploadAck{engine_->model().version(), {}}, now_ms());
    } else {
      ++st.members_failed;
      step = session.TaskFailed(
          m.task, outcome.code() == StatusCode::kNotFound ? outcome : AbortedError(std::string(outcome.message())));
    }
    if (step.kind != ClientStep::Kind::kPoll) {
      return InternalError("simulation: member " + ClientName(i) +
                           " did not poll after its group: " + step.error.ToString());
    }
    if (session.at_rest()) sessions_.erase(i);
    Schedule(static_cast<double>(step.after_ms), i);
    return Status::Ok();
  }

  // --secagg-dropout: the device is gone for this round; it is back a round deadline later.
  Status DropSecureMember(size_t i) {
    secure_.erase(i);
    --pending_;
    ++SecureStats().members_dropped;
    Schedule(static_cast<double>(o_.sync.round_deadline_ms), i);
    return Status::Ok();
  }

  const SimOptions& o_;
  const DeviceModel& dev_;
  const AttackSpec attack_spec_;
  const AttackKind attack_;
  const Dataset& train_;
  TaskRunner* const runner_;
  const ClientData data_;
  Engine* const engine_;
  ManualClock* const clock_;
  const size_t model_bytes_;
  const std::unique_ptr<Codec> codec_;               // null: uploads travel as float32
  size_t upload_bytes_ = 0;                          // of one upload: model_bytes_, or its encoded size
  std::map<size_t, ModelState> residual_;            // per client: the codec's error feedback (top-k)
  std::unique_ptr<CodedDownloads> coded_downloads_;  // null: downloads travel as float32
  std::vector<std::string> held_;  // per client, with coded downloads: the SHA-256 of what it rebuilt last
  const std::function<void(const SimRound&)>& on_round_;
  const size_t n_;
  const std::vector<double> ms_per_step_;
  DeviceAvailability availability_;
  const bool train_at_handout_;
  std::vector<uint32_t> tasks_of_;
  std::vector<int64_t> local_dp_releases_;  // with local DP: noised updates each client sent
  std::vector<bool> malicious_;
  double alie_z_ = 0.0;
  std::map<uint64_t, HonestStats> honest_;  // by base version: what omniscient attackers see

  EventNetwork net_;
  int64_t pending_ = 0;           // client events scheduled (polls, tasks under way)
  std::vector<uint32_t> parked_;  // told to wait; they poll again when the epoch moves
  uint64_t parked_epoch_ = 0;
  int64_t wave_ms_ = 0;
  double next_wave_ms_ = 0.0;
  std::map<size_t, InFlight> in_flight_;
  std::map<size_t, SecureMember> secure_;                 // with secure aggregation: members in a group
  ClientSessionOptions session_options_;                  // the seed's backoff jitter, the defaults otherwise
  std::unordered_map<uint32_t, ClientSession> sessions_;  // clients whose session is not at rest
  std::shared_ptr<const ModelState> current_base_;        // shared by the tasks handed out on it
  int64_t handed_out_ = 0;
  int64_t bytes_down_ = 0, bytes_up_ = 0;
  size_t reported_ = 0;
  Status failure_;
  SimResult result_;
  std::chrono::steady_clock::time_point start_;
};

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
    PLEXUS_ASSIGN_OR_RETURN(std::string id, engine->Join({ClientName(i), data.examples(i), "virtual"}));
    if (id != ClientName(i)) return InternalError("simulation: the engine renamed client " + ClientName(i));
  }
  FederationSim sim(options, train, runner, std::move(data), engine.get(), &clock, initial.num_params() * sizeof(float),
                    on_round);
  return sim.Run();
}

}  // namespace plexus
