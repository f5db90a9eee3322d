// FederationTransport: how a client talks to the server, in core types. The gRPC
// implementation is GrpcFederationTransport; tests can drive the client runtime through any
// other. Errors follow status.h: Unavailable and DeadlineExceeded mean "back off and retry".
// Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"
#include "core/task.h"

namespace plexus {

struct JoinReply {
  std::string client_id;
  std::string model_name;
};

// An update's header; the payload (safetensors bytes of the delta) travels separately.
struct UploadHeader {
  std::string client_id;
  std::string task_id;
  uint64_t base_version = 0;
  int64_t num_examples = 0;
  int64_t local_steps = 0;
  std::map<std::string, double> metrics;
};

class FederationTransport {
 public:
  virtual ~FederationTransport() = default;
  virtual Result<JoinReply> Join(const std::string& client_id, int64_t num_examples, const std::string& device) = 0;
  // May block up to wait_ms for work.
  virtual Result<PollAnswer> Poll(const std::string& client_id, int64_t wait_ms) = 0;
  // Appends the encoded model of `version` from byte `buffer->size()` on; on failure the bytes
  // received so far stay in `buffer`, so a retry resumes where it stopped. Sets *total_bytes.
  virtual Status Download(uint64_t version, std::string* buffer, uint64_t* total_bytes) = 0;
  // Returns the model version the server was at when it accepted the update. The transport may
  // hold on to `payload` (without copying it) after returning.
  virtual Result<uint64_t> Upload(const UploadHeader& header, std::shared_ptr<const std::string> payload) = 0;
  // For callers that hand the payload over.
  Result<uint64_t> Upload(const UploadHeader& header, std::string payload) {
    return Upload(header, std::make_shared<const std::string>(std::move(payload)));
  }
};

}  // namespace plexus
