// ClientRuntime's secure aggregation task: the client as one member of its round's group, the
// member's decisions taken by SecureMemberSession (client/secure_member_session.h), its messages
// carried by FederationTransport::SecureAggregation. Its keys and shares live in this process
// only: a client that restarts mid-round has left that group for good, and the server's group
// carries on without it (or aborts, and the round starts again).
#include <spdlog/spdlog.h>

#include "client/client_runtime.h"
#include "client/secure_member_session.h"
#include "privacy/gaussian_noise.h"
#include "privacy/secagg_crypto.h"

namespace plexus {

Result<secagg::View> ClientRuntime::CallGroup(const Task& task, const secagg::Call& call) {
  while (true) {
    Result<secagg::View> view = transport_->SecureAggregation(session_.client_id(), task.task_id, call);
    if (view.ok()) {
      session_.Succeeded();
      return view;
    }
    if (!ClientSession::Transient(view.status())) return view.status();
    PLEXUS_RETURN_IF_ERROR(BackOff(view.status()));
  }
}

ClientStep ClientRuntime::TrainSecurely(const Task& task) {
  const auto fail = [&](const Status& why) {
    if (Stopping()) return ClientStep::Failed(Stopped());
    spdlog::warn("task {}: secure aggregation: {}", task.task_id, why.ToString());
    // The task is lost, not the client: it carries on with the next one.
    const bool skip = why.code() == StatusCode::kNotFound || why.code() == StatusCode::kAborted ||
                      why.code() == StatusCode::kDataLoss;
    return session_.TaskFailed(task, skip ? why : AbortedError(std::string(why.message())));
  };
  secagg::Call ask;
  ask.want_setup = true;
  Result<secagg::View> view = CallGroup(task, ask);
  if (!view.ok()) return fail(view.status());
  if (!view->setup) return fail(DataLossError("the server sent no setup for the group"));
  Result<SecureMemberSession> member = SecureMemberSession::Create(*view->setup);
  if (!member.ok()) return fail(member.status());
  while (true) {
    if (Stopping()) return ClientStep::Failed(Stopped());
    SecureAction next = member->Next(*view);
    switch (next.kind) {
      case SecureAction::Kind::kSend: {
        // Fault injection (ClientOptions::quit_at_secure_stage): stop as a device that died here would.
        if (options_.quit_at_secure_stage == secagg::StageName(next.stage)) {
          spdlog::warn(
              "task {}: secure aggregation: quitting at stage '{}' without sending its message (fault "
              "injection)",
              task.task_id, secagg::StageName(next.stage));
          return ClientStep::Failed(
              AbortedError("quit at secure aggregation stage '" + secagg::StageName(next.stage) + "'"));
        }
        view = CallGroup(task, next.call);
        if (!view.ok()) return fail(view.status());
        if (!next.say.empty()) spdlog::info("task {}: secure aggregation: {}", task.task_id, next.say);
        break;
      }
      case SecureAction::Kind::kAskLater:
        Sleep(next.after_ms);
        view = CallGroup(task, secagg::Call{});
        if (!view.ok()) return fail(view.status());
        break;
      case SecureAction::Kind::kTrain: {
        Result<TrainedDelta> trained = TrainDelta(task);
        if (!trained.ok()) return session_.TaskFailed(task, trained.status());
        SaveUpdateCopy(task, *trained);
        Result<X25519KeyPair> rounding = NewX25519KeyPair();  // 32 fresh random bytes for the rounding
        if (!rounding.ok()) return fail(rounding.status());
        // OpenSSL's generator: the noise of distributed DP must be unknown to the server.
        const std::unique_ptr<GaussianNoise> noise = MakeSecureGaussianNoise();
        if (Status s = member->SetUpdate(trained->delta.data(), trained->outcome.num_examples, rounding->private_key,
                                         noise.get());
            !s.ok()) {
          return fail(s);
        }
        spdlog::info("task {}: trained ({} steps, train loss {:.4f})", task.task_id, trained->outcome.steps,
                     trained->outcome.mean_loss);
        view = CallGroup(task, secagg::Call{});
        if (!view.ok()) return fail(view.status());
        break;
      }
      case SecureAction::Kind::kDone:
        spdlog::info("task {}: secure aggregation: the group's mean is published", task.task_id);
        return session_.UploadAnswered(task.task_id, UploadAck{task.model_version + 1, std::nullopt}, NowMs());
      case SecureAction::Kind::kFail:
        if (next.error.message().find("refused the server's unmask request") != std::string_view::npos) {
          spdlog::error("task {}: secure aggregation: {}", task.task_id, next.error.message());
        }
        return fail(next.error);
    }
  }
}

}  // namespace plexus
