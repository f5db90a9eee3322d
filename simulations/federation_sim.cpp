#include "simulations/federation_sim.h"

namespace plexus {

std::string FederationSim::ClientName(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "sim-%07zu", i);
  return name;
}

FederationSim::FederationSim(const SimOptions& o, const Dataset& train, TaskRunner* runner, ClientData data,
                             Engine* engine, ManualClock* clock, size_t model_bytes,
                             const std::function<void(const SimRound&)>& on_round)
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
      train_at_handout_(attack_ == AttackKind::kIpm || attack_ == AttackKind::kAlie || attack_ == AttackKind::kMinMax),
      tasks_of_(n_, 0) {
  net_.ReserveNodes(1 + n_ + static_cast<size_t>(std::max<int64_t>(o.edges, 0)));
  net_.AddNode({0.0, o.server_mbps, o.server_mbps});
  for (size_t i = 0; i < n_; ++i) {
    const double f = dev_.BandwidthFactor(i, o.seed);
    net_.AddNode({dev_.latency_ms, dev_.up_mbps * f, dev_.down_mbps * f});
  }
  for (int64_t e = 0; e < o.edges; ++e) net_.AddNode({o.edge_latency_ms, o.edge_mbps, o.edge_mbps});
  edges_.resize(static_cast<size_t>(o.edges));
  partial_bytes_ = 32 + sizeof(int64_t) * engine_->model().num_params();
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

Result<SimResult> FederationSim::Run() {
  start_ = std::chrono::steady_clock::now();
  result_.strategy = engine_->strategy_description();
  result_.attackers = std::count(malicious_.begin(), malicious_.end(), true);
  result_.examples_per_client = data_.sampled_examples();
  net_.After(0.0, [this] { Tick(); });  // ticks first at equal times: deadlines before polls
  std::vector<uint32_t> everyone(n_);
  std::iota(everyone.begin(), everyone.end(), 0u);
  PollNow(std::move(everyone));
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

void FederationSim::Schedule(double delay_ms, size_t i) {
  ++pending_;
  net_.After(delay_ms, [this, i] {
    --pending_;
    Guard(ClientPolls(i));
  });
}

void FederationSim::Guard(const Status& s) {
  if (!s.ok() && failure_.ok()) failure_ = s;
  if (!s.ok() || engine_->finished()) net_.Stop();
}

ClientSession& FederationSim::SessionOf(size_t i) {
  return sessions_.try_emplace(static_cast<uint32_t>(i), session_options_, ClientName(i)).first->second;
}

void FederationSim::PollNow(std::vector<uint32_t> clients) {
  if (clients.empty()) return;
  pending_ += static_cast<int64_t>(clients.size());
  net_.After(0.0, [this, clients = std::move(clients)] {
    for (size_t k = 0; k < clients.size(); ++k) {
      --pending_;
      Guard(ClientPolls(clients[k]));
      // Where Guard stopped the network, the events of the clients after this one would not run.
      if (!failure_.ok() || engine_->finished()) return;
    }
  });
}

void FederationSim::WakeParked() {
  PollNow(std::exchange(parked_, {}));
  parked_epoch_ = engine_->poll_epoch();
}

void FederationSim::WakeIfEpochMoved() {
  if (engine_->poll_epoch() != parked_epoch_) WakeParked();
}

void FederationSim::ReportNewVersions() {
  if (o_.sync.secagg && reported_ < engine_->history().size()) {
    SecureStats().unmask_ms_max = std::max(SecureStats().unmask_ms_max, engine_->status().last_secure_unmask_ms);
  }
  for (; reported_ < engine_->history().size(); ++reported_) {
    SimRound r{engine_->history()[reported_], Elapsed(), net_.now_ms() / 1000.0, bytes_down_, bytes_up_};
    result_.rounds.push_back(r);
    if (on_round_) on_round_(r);
  }
}

void FederationSim::Tick() {
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

TrainOptions FederationSim::TrainingOptions(size_t i, const Task& task, uint64_t batch_seed) {
  TrainOptions o = TrainOptionsFor(task, batch_seed);
  if (o.optimizer == "adamw") o.optimizer_state = &optimizer_states_[i];
  return o;
}

Status FederationSim::ClientPolls(size_t i) {
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
      return InternalError(
          "simulation: client " + ClientName(i) + " cannot take the engine's answer: " +
          (step.kind == ClientStep::Kind::kEvaluate ? "federated evaluation is not simulated" : step.error.ToString()));
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
  if (edges_.empty()) bytes_down_ += static_cast<int64_t>(download_bytes);  // else counted per edge fetch
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
  PLEXUS_RETURN_IF_ERROR(runner_->Start(i, {start, data_.Indices(i), malicious_[i] && attack_ == AttackKind::kLabelFlip,
                                            TrainingOptions(i, task, batch_seed)}));
  InFlight f{task, start, std::nullopt};
  ++handed_out_;
  if (train_at_handout_) {
    PLEXUS_ASSIGN_OR_RETURN(Update trained, FinishTraining(i, f));
    f.update = std::move(trained);
  }
  in_flight_[i] = std::move(f);
  // Download, local steps, upload; the update is submitted when the upload has arrived.
  ++pending_;
  if (!edges_.empty()) {
    StartViaEdge(i, task.model_version, download_bytes, compute_ms);
    return Status::Ok();
  }
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

Result<Update> FederationSim::FinishTraining(size_t i, const InFlight& f) {
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

Status FederationSim::UpdateArrives(size_t i) {
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
  if (edges_.empty()) bytes_up_ += static_cast<int64_t>(upload_bytes_);  // else counted per partial
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
  const ClientStep step = s.ok() ? session.UploadAnswered(task_id, UploadAck{engine_->model().version(), {}}, now_ms())
                                 : session.UploadAnswered(task_id, s, now_ms());
  if (step.kind != ClientStep::Kind::kPoll) {
    return InternalError("simulation: client " + ClientName(i) + " did not poll after its upload's answer");
  }
  if (step.pause == ClientStep::Pause::kRefusals) ++result_.waits_after_refusals;
  if (session.at_rest()) sessions_.erase(i);
  Schedule(static_cast<double>(step.after_ms), i);
  return Status::Ok();
}

void FederationSim::StartViaEdge(size_t i, uint64_t version, size_t download_bytes, double compute_ms) {
  const size_t e = i % edges_.size();
  Edge& edge = edges_[e];
  ++edge.outstanding[version];
  EventNetwork::Handler download = [this, i, e, download_bytes, compute_ms] {
    net_.Send(EdgeNode(e), Node(i), download_bytes, [this, i, e, compute_ms] {
      net_.After(compute_ms, [this, i, e] {
        net_.Send(Node(i), EdgeNode(e), upload_bytes_, [this, i, e] { Guard(EdgeReceives(i, e)); });
      });
    });
  };
  if (edge.cached == version) return download();
  edge.waiting[version].push_back(std::move(download));
  if (!edge.fetching.insert(version).second) return;  // already on its way
  bytes_down_ += static_cast<int64_t>(model_bytes_);
  net_.Send(0, EdgeNode(e), model_bytes_, [this, e, version] {
    Edge& edge = edges_[e];
    edge.fetching.erase(version);
    edge.cached = std::max(edge.cached.value_or(version), version);
    std::vector<EventNetwork::Handler> ready = std::move(edge.waiting[version]);
    edge.waiting.erase(version);
    for (EventNetwork::Handler& d : ready) d();
  });
}

Status FederationSim::EdgeReceives(size_t i, size_t e) {
  if (engine_->finished()) return Status::Ok();
  Edge& edge = edges_[e];
  const uint64_t version = in_flight_.at(i).task.model_version;
  edge.arrived[version].push_back(static_cast<uint32_t>(i));
  if (--edge.outstanding[version] > 0) return Status::Ok();
  // Every task on that version has reported: one partial sum goes to the server, and its updates
  // are submitted when it has arrived (with exact sums, what the server folds from the partial is
  // what it folds from the updates).
  std::vector<uint32_t> held = std::move(edge.arrived[version]);
  edge.arrived.erase(version);
  edge.outstanding.erase(version);
  net_.Send(EdgeNode(e), 0, partial_bytes_, [this, held = std::move(held)] {
    bytes_up_ += static_cast<int64_t>(partial_bytes_);
    if (!train_at_handout_ && !engine_->finished()) {  // their training is finished next, in this order
      const std::vector<uint64_t> keys(held.begin(), held.end());
      if (Status s = runner_->WillFinish(keys); !s.ok()) return Guard(s);
    }
    for (uint32_t k : held) {
      --pending_;
      Guard(UpdateArrives(k));
    }
  });
  return Status::Ok();
}

Status FederationSim::StartSecureTask(size_t i, const Task& task, std::shared_ptr<const ModelState> start,
                                      size_t download_bytes, double compute_ms, uint64_t batch_seed) {
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

}  // namespace plexus
