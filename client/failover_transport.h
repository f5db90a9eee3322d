// FailoverTransport: a client's transport over several servers of one federation (its own list,
// then the fallbacks the server it joined names: an edge aggregator's siblings or its parent).
// Calls go to one server at a time; once every call to it has failed with Unavailable or
// DeadlineExceeded for `switch_after_ms`, the next server takes over, and the failing call's
// error goes back to the runtime, which backs off and calls again: the new server does not know
// the client, and the runtime joins it (ClientSession's rejoin). Any other answer, error or not,
// shows the server alive. Owns the transports it makes; the clock is borrowed. Thread-compatible
// as every transport is, except Shutdown, which is thread-safe.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "client/federation_transport.h"
#include "core/clock.h"

namespace plexus {

// The addresses of a comma-separated list ("a:1,b:2"), empty pieces left out.
std::vector<std::string> SplitAddresses(const std::string& list);

// Servers sharded by client id (edge aggregators behind a headless Service): `pattern` holds
// "{shard}", which becomes each shard in [0, shards), starting with the client's own (FNV-1a of
// its id, modulo shards: the same server every time, where its task and upload offset are) and
// going on in order, the next ones being its fallbacks. InvalidArgument without "{shard}",
// without an id, or for shards < 1.
Result<std::vector<std::string>> ShardAddresses(const std::string& pattern, int shards, const std::string& client_id);

class FailoverTransport final : public FederationTransport {
 public:
  using Factory = std::function<std::unique_ptr<FederationTransport>(const std::string& address)>;
  // REQUIRES: `addresses` not empty.
  FailoverTransport(std::vector<std::string> addresses, Factory make, int64_t switch_after_ms, const Clock* clock);

  // The server calls go to now.
  const std::string& current_address() const { return addresses_[index_]; }
  const std::vector<std::string>& addresses() const { return addresses_; }

  Result<JoinReply> Join(const std::string& client_id, int64_t num_examples, const std::string& device) override;
  Result<PollAnswer> Poll(const std::string& client_id, int64_t wait_ms) override;
  Status Download(uint64_t version, DownloadSink* sink) override;
  Status DownloadCoded(uint64_t version, const std::string& codec, const std::string& base_sha256, std::string* buffer,
                       uint64_t* total_bytes, CodedDownload* info) override;
  Status ReportEvaluation(const std::string& client_id, const std::string& task_id,
                          const Evaluation& evaluation) override;
  Result<secagg::View> SecureAggregation(const std::string& client_id, const std::string& task_id,
                                         const secagg::Call& call) override;
  Result<UploadAck> Upload(const UploadHeader& header, std::shared_ptr<const Payload> payload) override;
  void Shutdown() override;

 private:
  // Notes how the current server answered; switches to the next one once it has failed long enough.
  void Observe(const Status& s);

  std::vector<std::string> addresses_;
  const Factory make_;
  const int64_t switch_after_ms_;
  const Clock* const clock_;
  size_t index_ = 0;
  std::optional<int64_t> failing_since_ms_;  // the first of the current server's unbroken failures
  std::mutex mu_;                            // guards current_'s replacement against Shutdown
  std::unique_ptr<FederationTransport> current_;
  bool shut_down_ = false;  // guarded by mu_
};

}  // namespace plexus
