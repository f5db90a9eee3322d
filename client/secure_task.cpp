// ClientRuntime's secure aggregation task: the client as one member of its round's group
// (privacy/secagg.h), driven over FederationTransport::SecureAggregation. Its keys and shares
// live in this process only: a client that restarts mid-round has left that group for good, and
// the server's group carries on without it (or aborts and the round starts again).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <optional>

#include "client/client_runtime.h"
#include "privacy/secagg_crypto.h"

namespace plexus {
namespace {

// Values per masked chunk: 1 MiB, the server's largest.
constexpr size_t kChunkValues = 1 << 18;

// A failure of the group, as ClientSession::TaskFailed takes it: the task is skipped, the
// client carries on.
Status GroupFailed(const Status& why) {
  if (why.code() == StatusCode::kNotFound || why.code() == StatusCode::kAborted ||
      why.code() == StatusCode::kDataLoss || ClientSession::Transient(why) || why.code() == StatusCode::kCancelled) {
    return why;
  }
  return AbortedError(std::string(why.message()));  // refused by the group: this task is lost, not the client
}

}  // namespace

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

Result<secagg::View> ClientRuntime::WaitForStage(const Task& task, secagg::Server::Stage stage) {
  while (true) {
    PLEXUS_ASSIGN_OR_RETURN(secagg::View view, CallGroup(task, secagg::Call{}));
    if (view.stage == stage) return view;
    if (view.stage == secagg::Server::Stage::kAborted) {
      return AbortedError("the secure aggregation group aborted: " + view.abort_reason);
    }
    if (view.stage > stage) {
      return NotFoundError("the secure aggregation group moved on to '" + secagg::StageName(view.stage) +
                           "' without this client's '" + secagg::StageName(stage) + "'");
    }
    Sleep(std::max<int64_t>(10, view.retry_after_ms));
    if (Stopping()) return Stopped();
  }
}

ClientStep ClientRuntime::TrainSecurely(const Task& task) {
  const auto fail = [&](const Status& why) {
    if (Stopping()) return ClientStep::Failed(Stopped());
    spdlog::warn("task {}: secure aggregation: {}", task.task_id, why.ToString());
    return session_.TaskFailed(task, GroupFailed(why));
  };
  secagg::Call ask;
  ask.want_setup = true;
  Result<secagg::View> view = CallGroup(task, ask);
  if (!view.ok()) return fail(view.status());
  if (!view->setup) return fail(DataLossError("the server sent no setup for the group"));
  const secagg::Setup setup = *view->setup;
  Result<std::unique_ptr<secagg::Member>> member = secagg::Member::Create(setup.params, setup.member);
  Result<secagg::WeightedEncoding> encoding = secagg::WeightedEncoding::For(setup);
  if (!member.ok()) return fail(member.status());
  if (!encoding.ok()) return fail(encoding.status());

  // Fault injection (ClientOptions::quit_at_secure_stage): stop as a device that died here would.
  const auto quit_at = [&](secagg::Server::Stage stage) -> std::optional<ClientStep> {
    if (options_.quit_at_secure_stage != secagg::StageName(stage)) return std::nullopt;
    spdlog::warn("task {}: secure aggregation: quitting at stage '{}' without sending its message (fault injection)",
                 task.task_id, secagg::StageName(stage));
    return ClientStep::Failed(AbortedError("quit at secure aggregation stage '" + secagg::StageName(stage) + "'"));
  };

  // 1. Keys.
  if (auto quit = quit_at(secagg::Server::Stage::kAdvertise)) return *quit;
  secagg::Call advert;
  advert.kind = secagg::Call::Kind::kAdvert;
  Result<secagg::KeyAdvert> keys = (*member)->Advertise();
  if (!keys.ok()) return fail(keys.status());
  advert.advert = *keys;
  if (view = CallGroup(task, advert); !view.ok()) return fail(view.status());
  spdlog::info("task {}: secure aggregation: advertised keys (member {} of {}, degree {}, threshold {})", task.task_id,
               setup.member, setup.params.members.size(), setup.params.degree, setup.params.threshold);

  // 2. Shares of this member's secrets, one pair per neighbour.
  if (view = WaitForStage(task, secagg::Server::Stage::kShareKeys); !view.ok()) return fail(view.status());
  if (auto quit = quit_at(secagg::Server::Stage::kShareKeys)) return *quit;
  secagg::Call shares;
  shares.kind = secagg::Call::Kind::kShares;
  Result<secagg::SealedShares> sealed = (*member)->ShareKeys(view->adverts);
  if (!sealed.ok()) return fail(sealed.status());
  shares.shares = std::move(sealed).value();
  const size_t neighbours = shares.shares.to.size();
  if (view = CallGroup(task, shares); !view.ok()) return fail(view.status());
  spdlog::info("task {}: secure aggregation: shared keys with {} neighbours", task.task_id, neighbours);

  // 3. Training, then the masked update.
  Result<TrainedDelta> trained = TrainDelta(task);
  if (!trained.ok()) return session_.TaskFailed(task, trained.status());
  SaveUpdateCopy(task, *trained);
  if (view = WaitForStage(task, secagg::Server::Stage::kMaskedInput); !view.ok()) return fail(view.status());
  if (auto quit = quit_at(secagg::Server::Stage::kMaskedInput)) return *quit;
  Result<X25519KeyPair> rounding = NewX25519KeyPair();  // 32 fresh random bytes for the rounding
  if (!rounding.ok()) return fail(rounding.status());
  int64_t clipped = 0;
  Result<std::vector<uint32_t>> encoded =
      encoding->Encode(trained->delta.data(), trained->outcome.num_examples, rounding->private_key, &clipped);
  if (!encoded.ok()) return fail(encoded.status());
  Result<secagg::MaskedInput> masked = (*member)->MaskInput(*encoded, view->shares);
  if (!masked.ok()) return fail(masked.status());
  const std::vector<uint32_t>& values = masked->values;
  for (size_t offset = view->masked_received; offset < values.size();) {
    secagg::Call chunk;
    chunk.kind = secagg::Call::Kind::kMaskedChunk;
    chunk.offset = offset;
    const size_t n = std::min(kChunkValues, values.size() - offset);
    chunk.values.assign(values.begin() + static_cast<std::ptrdiff_t>(offset),
                        values.begin() + static_cast<std::ptrdiff_t>(offset + n));
    if (view = CallGroup(task, chunk); !view.ok()) return fail(view.status());
    offset =
        view->stage == secagg::Server::Stage::kMaskedInput && !view->answered ? view->masked_received : values.size();
  }
  spdlog::info(
      "task {}: secure aggregation: sent the masked update ({} values, {} bytes; {} values clipped to "
      "±{:g}; {} examples, train loss {:.4f})",
      task.task_id, values.size(), values.size() * 4, clipped, setup.clip, trained->outcome.num_examples,
      trained->outcome.mean_loss);

  // 4. Unmasking: the shares the server asks for, never both of one member's secrets.
  if (view = WaitForStage(task, secagg::Server::Stage::kUnmask); !view.ok()) return fail(view.status());
  if (auto quit = quit_at(secagg::Server::Stage::kUnmask)) return *quit;
  const secagg::UnmaskRequest asked = view->unmask;
  Result<secagg::RevealedShares> revealed = (*member)->Unmask(asked);
  if (!revealed.ok()) {
    spdlog::error("task {}: secure aggregation: refused the server's unmask request: {}", task.task_id,
                  revealed.status().ToString());
    return fail(revealed.status());
  }
  secagg::Call reveal;
  reveal.kind = secagg::Call::Kind::kRevealed;
  reveal.revealed = std::move(revealed).value();
  if (view = CallGroup(task, reveal); !view.ok()) return fail(view.status());
  spdlog::info("task {}: secure aggregation: revealed shares ({} survivors, {} dropped)", task.task_id,
               asked.survivors.size(), asked.dropped.size());
  // The group's outcome: done (published), or aborted after all.
  Result<secagg::View> outcome = WaitForStage(task, secagg::Server::Stage::kDone);
  if (!outcome.ok()) return fail(outcome.status());
  spdlog::info("task {}: secure aggregation: the group's mean is published", task.task_id);
  return session_.UploadAnswered(task.task_id, UploadAck{task.model_version + 1, std::nullopt}, NowMs());
}

}  // namespace plexus
