// Uploads (raw byte streams, resumable), their status, federated-evaluation reports and secure
// aggregation's messages: the door's handlers that take clients' work in.
#include "server/rpc/federation_service_impl.h"

#include "aggregators/update_bundle.h"
#include "core/large_block_source.h"

namespace plexus {

grpc::Status FederationServiceImpl::UploadUpdateRaw(grpc::ServerContext* ctx,
                                                    grpc::ServerReader<grpc::ByteBuffer>* reader,
                                                    v1::UploadReply* rep) {
  UploadChunks chunks(reader);
  Result<UpdateChunkView> chunk = InvalidArgumentError("an upload must start with a header chunk");
  if (!chunks.Next(&chunk) || !chunk.ok() || !chunk->has_header) {
    return Refuse("upload",
                  chunk.ok() ? InvalidArgumentError("an upload must start with a header chunk") : chunk.status());
  }
  v1::UpdateHeader header;
  if (!header.ParseFromString(chunk->header)) {
    return Refuse("upload", InvalidArgumentError("malformed upload chunk: the header does not parse"));
  }
  Result<std::string> who = Identify(ctx, header.client_id());
  if (!who.ok()) return Refuse("upload", who.status());
  size_t limit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(header.client_id()); !limited.ok()) return RefuseLocked("upload", limited);
    // Before any byte is received or kept for a resume: a joined client's open task of its own.
    if (Status open = engine_->CheckOpenTask(header.client_id(), header.task_id()); !open.ok()) {
      return RefuseLocked("upload", open.WithContext("upload from " + header.client_id()));
    }
    limit = engine_->model().num_bytes() + (1 << 20);  // data plus a generous JSON header
    if (upload_codec_) limit = std::max(limit, upload_codec_->EncodedSize(*codec_layout_) + (1 << 20));
    if (partial_sum_codec_) limit = std::max(limit, partial_sum_codec_->EncodedSize(*codec_layout_) + (1 << 20));
    if (bundle_codec_ && header.codec() == bundle_codec_->spec()) {
      // float32 values and names for each forwarded update (coded ones are smaller).
      limit = std::max(limit, static_cast<size_t>(info_.max_bundle_updates) *
                                      (bundle_codec_->EncodedSize(*codec_layout_) + 3 * 1024) +
                                  (1 << 20));
    }
  }
  if (header.total_bytes() > limit) {
    return Refuse("upload",
                  ResourceExhaustedError("update of " + std::to_string(header.total_bytes()) +
                                         " bytes exceeds the limit of " + std::to_string(limit) + " for this model"));
  }
  if (header.encoding() != v1::ENCODING_DELTA_SAFETENSORS_F32 &&
      header.encoding() != v1::ENCODING_WEIGHTS_SAFETENSORS_F32 && header.encoding() != v1::ENCODING_DELTA_CODEC) {
    return Refuse("upload", InvalidArgumentError("unknown update encoding " + std::to_string(header.encoding())));
  }
  const bool coded = header.encoding() == v1::ENCODING_DELTA_CODEC;
  // Fold and store the codes, never a float32 copy (int8, top-k, fp16, bf16 into FedAvg & co).
  bool keep_coded = false;
  // An edge aggregator's partial sum, whatever the tasks' codec (ServerInfo::accept_partial_sums).
  const bool partial_sum = coded && partial_sum_codec_ && header.codec() == partial_sum_codec_->spec();
  // An edge's forwarded client updates (ServerInfo::max_bundle_updates).
  const bool bundle = coded && bundle_codec_ && header.codec() == bundle_codec_->spec();
  const Codec* codec = partial_sum ? partial_sum_codec_.get() : bundle ? bundle_codec_.get() : upload_codec_.get();
  if ((partial_sum || bundle) && !info_.edge_clients.empty() && !info_.edge_clients.count(header.client_id())) {
    return Refuse("upload", PermissionDeniedError(std::string(partial_sum ? "a partial sum" : "forwarded updates") +
                                                  " from " + header.client_id() +
                                                  ", which is not one of this server's edges (--edge-clients)"));
  }
  if (partial_sum || bundle) {
    keep_coded = true;  // the strategy folds a partial's integers; the engine unpacks a bundle
    if (header.offset() > 0) {
      return Refuse("upload", FailedPreconditionError("a compressed update cannot resume: upload from byte 0"));
    }
  } else if (coded && header.codec() == kUpdateBundleCodec && header.codec() != info_.upload_codec) {
    return Refuse("upload", InvalidArgumentError("forwarded updates (an edge aggregator's --upstream-forward raw) "
                                                 "for task " +
                                                 header.task_id() +
                                                 ", but this server takes none: it needs --max-bundle-updates "
                                                 "and no --secagg"));
  } else if (coded && header.codec() == kPartialSumCodec && header.codec() != info_.upload_codec) {
    return Refuse("upload",
                  InvalidArgumentError(
                      "a partial sum (an edge aggregator's) for task " + header.task_id() +
                      ", but this server takes none: it needs sync rounds, "
                      "--mode async or semiasync, and a strategy that keeps exact sums (fedavg_exact, or exact=true) "
                      "or adds central DP noise to them (dp_fedavg with a fixed clip)"));
  } else if (coded) {
    std::lock_guard<std::mutex> lock(mu_);
    // A server without an upload codec names none in its tasks: the check comes before any use of it.
    if (!upload_codec_ || !TakesCodecLocked(header.client_id(), info_.upload_codec) ||
        header.codec() != info_.upload_codec) {
      return RefuseLocked("upload", InvalidArgumentError("update of task " + header.task_id() + " in codec '" +
                                                         header.codec() + "', which its task did not name"));
    }
    keep_coded = upload_codec_->has_coded_form() && engine_->folds_coded();
    if (header.offset() > 0) {  // only float32 uploads are kept for a resume
      return RefuseLocked("upload", FailedPreconditionError("a compressed update cannot resume: upload from byte 0"));
    }
  }
  // Held until the update is submitted or refused: the places bound how many decoded updates
  // the server holds at once.
  const int64_t started_ms = clock_->NowMs();
  const UploadCall call{ctx->peer(), [ctx] { ctx->TryCancel(); }};
  UploadPlaces::Place place(&places_, &call, *who);
  if (!place.status().ok()) return Refuse("upload", place.status());
  Result<ReceivedUpload> received = [&] {
    // Decoded where the store keeps it (its update files, on tmpfs), so that storing it copies nothing.
    const ScopedLargeBlockSource decode_into(store_->UpdateMemory());
    return coded ? ReceiveCodedUpload(chunks, header, *codec, *codec_layout_, keep_coded, &place)
                 : ReceiveUpload(chunks, header, &partial_, &place);
  }();
  if (!received.ok()) return Refuse("upload", received.status());
  place.Received();
  const int64_t received_ms = clock_->NowMs();
  Update u = UpdateFromHeader(header, std::move(received->values));
  u.coded = std::move(received->coded);
  if (bundle && static_cast<int64_t>(BundledOrSelf(u).size()) > info_.max_bundle_updates) {
    return RefuseContent(header,
                         ResourceExhaustedError("a bundle of " + std::to_string(BundledOrSelf(u).size()) +
                                                " forwarded updates; this server takes at most " +
                                                std::to_string(info_.max_bundle_updates) + " (--max-bundle-updates)"));
  }
  if (header.encoding() == v1::ENCODING_WEIGHTS_SAFETENSORS_F32) {
    // Weights become a delta against the task's base version (read from its checkpoint), not
    // against whatever the model is now: in async mode versions move on while a client trains.
    Result<ModelState> base = store_->Checkpoint(header.base_version());
    if (!base.ok()) {
      return Refuse("upload", FailedPreconditionError("weights for task " + header.task_id() + " start from version " +
                                                      std::to_string(header.base_version()) +
                                                      ", which this server cannot read: " + base.status().message()));
    }
    Status layout = u.delta.CheckSameLayout(*base);
    if (!layout.ok()) return RefuseContent(header, layout.WithContext("update for task " + header.task_id()));
    u.delta.Subtract(*base);
  }
  Result<double> norm = norm_gate_.Measure(u, header.task_id());
  if (!norm.ok()) return RefuseContent(header, norm.status());

  std::unique_lock<std::mutex> lock(mu_);
  if (received->resumed) {
    ++uploads_resumed_;
    upload_bytes_resumed_ += static_cast<int64_t>(received->resumed_from);
  }
  // An update sent again because its acknowledgement was lost was checked when it was taken:
  // the bound may have moved since, and refusing it now would deny work already merged.
  if (!engine_->Acknowledged(header.client_id(), header.task_id())) {
    const Status within = norm_gate_.Admit(header.client_id(), header.task_id(), *norm, engine_->model());
    if (!within.ok()) return RefuseContentLocked(header, within);
  }
  // Commits the engine left to the committer hold a model each: wait while there are too many.
  cv_.wait(lock, [this] { return engine_->commits_pending() < kMaxPendingCommits || shutting_down_; });
  Result<AdmittedUpdate> admitted = engine_->Admit(std::move(u));
  Status s = admitted.status();
  uint64_t version_before = engine_->model().version();
  size_t commits_before = engine_->commits_pending();
  if (admitted.ok()) {
    // The durable write without the lock: uploads that finish meanwhile are admitted and share
    // the store's next commit (group commit) instead of syncing one after another.
    lock.unlock();
    const Status persisted = engine_->Persist(*admitted);
    lock.lock();
    version_before = engine_->model().version();
    commits_before = engine_->commits_pending();
    s = engine_->Complete(std::move(admitted).value(), persisted);
  }
  if (s.ok() && (engine_->model().version() != version_before || engine_->commits_pending() > commits_before)) {
    closing_upload_received_ms_ = received_ms;  // this upload completed a version
  }
  if (!s.ok() && s.code() == StatusCode::kInvalidArgument) {
    return RefuseContentLocked(header, s.WithContext("update from " + header.client_id()));
  }
  if (!s.ok()) return RefuseLocked("upload", s.WithContext("update from " + header.client_id()));
  upload_metrics_.CountUpload(header.total_bytes(), static_cast<double>(clock_->NowMs() - started_ms) / 1000.0);
  rep->set_accepted_for_version(version_before);
  if (engine_->model().version() != version_before) VersionServedLocked(engine_->history().back(), "");
  if (header.want_next_task()) {
    // What a poll would answer at once; "wait" is left to the client's next (long) poll. A
    // failed poll does not undo the accepted update: the client polls and hears the error.
    Result<PollAnswer> next = evaluations_.Poll(header.client_id());
    if (next.ok() && !AnswerLocked(header.client_id(), *next, rep->mutable_next())) rep->clear_next();
  }
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status FederationServiceImpl::RefuseContent(const v1::UpdateHeader& header, const Status& why) {
  std::lock_guard<std::mutex> lock(mu_);
  return RefuseContentLocked(header, why);
}

grpc::Status FederationServiceImpl::RefuseContentLocked(const v1::UpdateHeader& header, const Status& why) {
  const uint64_t before = engine_->model().version();
  if (Status s = engine_->Refused(header.client_id(), header.task_id()); !s.ok()) {
    spdlog::error("after refusing task {}: {}", header.task_id(), s.ToString());
  }
  if (engine_->model().version() != before) VersionServedLocked(engine_->history().back(), " after a refusal");
  cv_.notify_all();
  return RefuseLocked("upload", why);
}

grpc::Status FederationServiceImpl::UploadStatus(grpc::ServerContext* ctx, const v1::UploadStatusRequest* req,
                                                 v1::UploadStatusReply* rep) {
  Result<std::string> who = Identify(ctx, req->client_id());
  if (!who.ok()) return Refuse("upload status", who.status());
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (Status limited = RateLimited(req->client_id()); !limited.ok()) return RefuseLocked("upload status", limited);
  }
  rep->set_received_bytes(partial_.HeldBytes(req->client_id(), req->task_id(), req->total_bytes()));
  return grpc::Status::OK;
}

grpc::Status FederationServiceImpl::ReportEvaluation(grpc::ServerContext* ctx, const v1::EvaluationReport* req,
                                                     v1::EvaluationAck*) {
  Result<std::string> who = Identify(ctx, req->client_id());
  if (!who.ok()) return Refuse("evaluation report", who.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("evaluation report", limited);
  Evaluation e;
  e.loss = req->loss();
  e.accuracy = req->accuracy();
  e.examples = req->examples();
  if (Status s = evaluations_.Report(*who, req->task_id(), e); !s.ok()) return RefuseLocked("evaluation report", s);
  cv_.notify_all();
  return grpc::Status::OK;
}

grpc::Status FederationServiceImpl::SecureAggregation(grpc::ServerContext* ctx, const v1::SecAggRequest* req,
                                                      v1::SecAggReply* rep) {
  Result<std::string> who = Identify(ctx, req->client_id());
  if (!who.ok()) return Refuse("secure aggregation", who.status());
  Result<secagg::Call> call = SecAggCallFromProto(*req);
  if (!call.ok()) return Refuse("secure aggregation", call.status());
  std::lock_guard<std::mutex> lock(mu_);
  if (Status limited = RateLimited(*who); !limited.ok()) return RefuseLocked("secure aggregation", limited);
  const uint64_t before = engine_->model().version();
  Result<secagg::View> view = engine_->SecureAggregation(*who, req->task_id(), *call);
  // Members ask many times a second: the engine's status (a pass over every client) is read only
  // when a call saw the group at another stage than the last one did.
  if (view.ok() && static_cast<int>(view->stage) != last_view_stage_) {
    last_view_stage_ = static_cast<int>(view->stage);
    LogSecureStageLocked();
  }
  if (engine_->model().version() != before) VersionServedLocked(engine_->history().back(), "");
  cv_.notify_all();  // a stage or the round may have closed: polls may answer differently
  if (!view.ok()) return RefuseLocked("secure aggregation", view.status().WithContext("client " + *who));
  SecAggViewToProto(*view, rep);
  return grpc::Status::OK;
}

}  // namespace plexus
