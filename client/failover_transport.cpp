#include "client/failover_transport.h"

#include <spdlog/spdlog.h>

#include <algorithm>

namespace plexus {

std::vector<std::string> SplitAddresses(const std::string& list) {
  std::vector<std::string> out;
  size_t from = 0;
  while (from <= list.size()) {
    const size_t comma = std::min(list.find(',', from), list.size());
    if (comma > from) out.push_back(list.substr(from, comma - from));
    from = comma + 1;
  }
  return out;
}

Result<std::vector<std::string>> ShardAddresses(const std::string& pattern, int shards, const std::string& client_id) {
  const size_t at = pattern.find("{shard}");
  if (at == std::string::npos) {
    return InvalidArgumentError("the server address '" + pattern +
                                "' holds no {shard}, e.g. plexus-edge-{shard}.plexus-edge:50051");
  }
  if (shards < 1) return InvalidArgumentError("the number of shards must be at least 1");
  if (client_id.empty()) return InvalidArgumentError("a client id is needed: it picks the shard, the same every time");
  uint64_t hash = 14695981039346656037ULL;  // FNV-1a, 64 bits
  for (unsigned char ch : client_id) hash = (hash ^ ch) * 1099511628211ULL;
  std::vector<std::string> servers;
  for (int k = 0; k < shards; ++k) {
    std::string address = pattern;
    address.replace(at, 7,
                    std::to_string((hash % static_cast<uint64_t>(shards) + static_cast<uint64_t>(k)) %
                                   static_cast<uint64_t>(shards)));
    servers.push_back(std::move(address));
  }
  return servers;
}

FailoverTransport::FailoverTransport(std::vector<std::string> addresses, Factory make, int64_t switch_after_ms,
                                     const Clock* clock)
    : addresses_(std::move(addresses)), make_(std::move(make)), switch_after_ms_(switch_after_ms), clock_(clock) {
  current_ = make_(addresses_[0]);
}

void FailoverTransport::Observe(const Status& s) {
  const bool unreachable = s.code() == StatusCode::kUnavailable || s.code() == StatusCode::kDeadlineExceeded;
  if (!unreachable) {
    failing_since_ms_.reset();
    return;
  }
  const int64_t now = clock_->NowMs();
  if (!failing_since_ms_) failing_since_ms_ = now;
  if (addresses_.size() < 2 || now - *failing_since_ms_ < switch_after_ms_) return;
  const std::string& from = addresses_[index_];
  index_ = (index_ + 1) % addresses_.size();
  spdlog::warn("server {} has not answered for {:.1f} s ({}): turning to {}", from,
               static_cast<double>(now - *failing_since_ms_) / 1000.0, s.message(), addresses_[index_]);
  failing_since_ms_.reset();
  std::unique_ptr<FederationTransport> next = make_(addresses_[index_]);
  std::unique_ptr<FederationTransport> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) next->Shutdown();
    old = std::exchange(current_, std::move(next));
  }
}

Result<JoinReply> FailoverTransport::Join(const std::string& client_id, int64_t num_examples,
                                          const std::string& device) {
  Result<JoinReply> r = current_->Join(client_id, num_examples, device);
  Observe(r.status());
  if (r.ok()) {
    for (const std::string& server : r->fallback_servers) {
      if (std::find(addresses_.begin(), addresses_.end(), server) == addresses_.end()) {
        spdlog::info("fallback server {} (named by {})", server, addresses_[index_]);
        addresses_.push_back(server);
      }
    }
  }
  return r;
}

Result<PollAnswer> FailoverTransport::Poll(const std::string& client_id, int64_t wait_ms) {
  Result<PollAnswer> r = current_->Poll(client_id, wait_ms);
  Observe(r.status());
  return r;
}

Status FailoverTransport::Download(uint64_t version, DownloadSink* sink) {
  Status s = current_->Download(version, sink);
  Observe(s);
  return s;
}

Status FailoverTransport::DownloadCoded(uint64_t version, const std::string& codec, const std::string& base_sha256,
                                        std::string* buffer, uint64_t* total_bytes, CodedDownload* info) {
  Status s = current_->DownloadCoded(version, codec, base_sha256, buffer, total_bytes, info);
  Observe(s);
  return s;
}

Status FailoverTransport::ReportEvaluation(const std::string& client_id, const std::string& task_id,
                                           const Evaluation& evaluation) {
  Status s = current_->ReportEvaluation(client_id, task_id, evaluation);
  Observe(s);
  return s;
}

Result<secagg::View> FailoverTransport::SecureAggregation(const std::string& client_id, const std::string& task_id,
                                                          const secagg::Call& call) {
  Result<secagg::View> r = current_->SecureAggregation(client_id, task_id, call);
  Observe(r.status());
  return r;
}

Result<UploadAck> FailoverTransport::Upload(const UploadHeader& header, std::shared_ptr<const Payload> payload) {
  Result<UploadAck> r = current_->Upload(header, std::move(payload));
  Observe(r.status());
  return r;
}

void FailoverTransport::Shutdown() {
  std::lock_guard<std::mutex> lock(mu_);
  shut_down_ = true;
  current_->Shutdown();
}

}  // namespace plexus
