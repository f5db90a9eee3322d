// Secure aggregation in the simulator: each member's SecAgg+ calls and the server's views travel the
// event network as messages; the members are the real client's SecureMemberSession.
#include "simulations/federation_sim.h"

namespace plexus {

SimResult::SecureAggregation& FederationSim::SecureStats() {
  if (!result_.secagg) result_.secagg.emplace();
  return *result_.secagg;
}

double FederationSim::MsSince(std::chrono::steady_clock::time_point began) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
}

double FederationSim::NoteServerCall(std::chrono::steady_clock::time_point began) {
  const double ms = MsSince(began);
  SecureStats().server_call_ms_max = std::max(SecureStats().server_call_ms_max, ms);
  return ms;
}

void FederationSim::SecureCall(size_t i, secagg::Call call, double delay_ms) {
  const int64_t bytes = PayloadBytes(call);
  bytes_up_ += bytes;
  auto shared = std::make_shared<const secagg::Call>(std::move(call));
  net_.After(delay_ms, [this, i, bytes, shared] {
    net_.Send(Node(i), 0, static_cast<uint64_t>(bytes), [this, i, shared] { Guard(SecureCallArrives(i, *shared)); });
  });
}

Status FederationSim::SecureCallArrives(size_t i, const secagg::Call& call) {
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

Status FederationSim::SecureViewArrives(size_t i, const secagg::View& view) {
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
          runner_->Start(i, {m.start, data_.Indices(i), false, TrainingOptions(i, m.task, m.batch_seed)}));
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

Status FederationSim::SecureTrained(size_t i) {
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
  const std::unique_ptr<GaussianNoise> noise = MakeSeededGaussianNoise(rng.NextU64());  // distributed DP's
  const Status set = m.session->SetUpdate(delta.data(), out.num_examples, rounding, noise.get());
  const double cpu = MsSince(began);
  m.cpu_ms += cpu;
  if (!set.ok()) return EndSecureTask(i, AbortedError(std::string(set.message())));  // e.g. diverged
  SecureCall(i, secagg::Call{}, cpu);
  return Status::Ok();
}

void FederationSim::CountFinished(const SecureMember& m) {
  SimResult::SecureAggregation& st = SecureStats();
  ++st.members_done;
  st.member_cpu_ms += m.cpu_ms;
  st.member_cpu_ms_max = std::max(st.member_cpu_ms_max, m.cpu_ms);
  st.key_bytes_per_member += static_cast<double>(m.session->key_bytes());
  st.masked_bytes_per_member += static_cast<double>(m.session->masked_bytes());
}

Status FederationSim::EndSecureTask(size_t i, const Status& outcome) {
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

Status FederationSim::DropSecureMember(size_t i) {
  secure_.erase(i);
  --pending_;
  ++SecureStats().members_dropped;
  Schedule(static_cast<double>(o_.sync.round_deadline_ms), i);
  return Status::Ok();
}

}  // namespace plexus
