// FederationTransport: how a client talks to the server, in core types. The gRPC
// implementation is GrpcFederationTransport; tests can drive the client runtime through any
// other. Errors follow status.h: Unavailable and DeadlineExceeded mean "back off and retry".
// Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "client/download_sink.h"
#include "core/evaluation.h"
#include "core/model_state.h"
#include "core/payload.h"
#include "core/status.h"
#include "core/task.h"
#include "privacy/secagg_exchange.h"

namespace plexus {

struct JoinReply {
  std::string client_id;
  std::string model_name;
  // Every training task is a secure aggregation group's (the update goes through
  // FederationTransport::SecureAggregation, never Upload).
  bool secure_aggregation = false;
  // Servers of the same federation to turn to when this one stops answering (FailoverTransport).
  std::vector<std::string> fallback_servers{};
};

// An update's header; the payload (safetensors bytes of the delta, or the codec's bytes of it)
// travels separately.
struct UploadHeader {
  std::string client_id;
  std::string task_id;
  uint64_t base_version = 0;
  int64_t num_examples = 0;
  int64_t local_steps = 0;
  std::map<std::string, double> metrics;
  std::string codec{};  // the payload's codec (the task's upload_codec); empty: float32 safetensors
  // An earlier attempt of this upload failed: the server may hold its first part, so ask and
  // send only the rest. A first attempt skips that question (one call less per update).
  bool resume = false;
  // Ask for the next task in the reply (UploadAck::next), saving the poll that would follow.
  bool want_next_task = false;
};

struct UploadAck {
  uint64_t accepted_for_version = 0;  // the model version the server was at when it accepted
  // What a poll would have answered at once (a task, or finished), when asked for and known.
  std::optional<PollAnswer> next;
};

// What the bytes of a coded download (Task::download_codec) are; every chunk says the same.
struct CodedDownload {
  std::string codec;
  // The bytes are the change from the model with this ContentSha256 (the one the client named);
  // empty: they are the whole model, with `layout`'s tensors.
  std::string base_sha256;
  std::string model_sha256;  // ContentSha256 of the model rebuilt from them
  std::vector<TensorSpec> layout;
};

class FederationTransport {
 public:
  virtual ~FederationTransport() = default;
  virtual Result<JoinReply> Join(const std::string& client_id, int64_t num_examples, const std::string& device) = 0;
  // May block up to wait_ms for work.
  virtual Result<PollAnswer> Poll(const std::string& client_id, int64_t wait_ms) = 0;
  // Hands the encoded model of `version` (float32 safetensors) to `sink` from byte
  // sink->received() on; on failure what the sink took stays there, so a retry with the same sink
  // resumes where it stopped. A sink's DataLoss ends the download with it.
  virtual Status Download(uint64_t version, DownloadSink* sink) = 0;
  // As Download, in `codec`'s bytes (the task's download_codec), for a client that holds the
  // model whose ContentSha256 is `base_sha256` (empty: none). Fills *info; chunks of a resumed
  // download (non-empty buffer) that say something else than *info are DataLoss, and the caller
  // starts over. The default: FailedPrecondition (the caller then downloads float32).
  virtual Status DownloadCoded(uint64_t version, const std::string& codec, const std::string& base_sha256,
                               std::string* buffer, uint64_t* total_bytes, CodedDownload* info) {
    (void)version;
    (void)codec;
    (void)base_sha256;
    (void)buffer;
    (void)total_bytes;
    (void)info;
    return FailedPreconditionError("this transport does not carry coded downloads");
  }
  // Answers an evaluation task (Task::evaluate_only) with how its model did on the local held-out
  // data. The default refuses: transports that never get such tasks need not implement it.
  virtual Status ReportEvaluation(const std::string& client_id, const std::string& task_id,
                                  const Evaluation& evaluation) {
    (void)client_id;
    (void)task_id;
    (void)evaluation;
    return FailedPreconditionError("this transport does not carry evaluation reports");
  }
  // Secure aggregation: one member's call about its task's group, and the server's answer. The
  // default refuses: transports to servers that never run it need not implement it.
  virtual Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                                 const secagg::Call& call) {
    (void)client_id;
    (void)task_id;
    (void)call;
    return FailedPreconditionError("this transport does not carry secure aggregation");
  }
  // The transport may hold on to `payload` (without copying it) after returning.
  virtual Result<UploadAck> Upload(const UploadHeader& header, std::shared_ptr<const Payload> payload) = 0;
  // Thread-safe, unlike the calls: ends the calls in progress and every later one with
  // Cancelled, for a client that has been asked to stop (an interrupted upload stays resumable
  // on the server). Transports whose calls return promptly anyway need not override it.
  virtual void Shutdown() {}
  // For callers that hand the payload over.
  Result<UploadAck> Upload(const UploadHeader& header, std::string payload) {
    return Upload(header, Payload::Of(std::move(payload)));
  }
};

}  // namespace plexus
