#include "server/rpc/partial_uploads.h"

#include <algorithm>

namespace plexus {

void PartialUploads::Keep(const std::string& client, const std::string& task, uint64_t total,
                          SafetensorsStreamDecoder stream) {
  std::lock_guard<std::mutex> lock(mu_);
  DropLocked(client);
  if (stream.received() == 0 || total > budget_bytes_) return;
  const int64_t now = clock_->NowMs();
  while (!partial_.empty() && (bytes_ + total > budget_bytes_ || OldestLocked()->second.kept_ms + ttl_ms_ < now)) {
    DropLocked(OldestLocked()->first);
  }
  bytes_ += total;
  partial_.insert_or_assign(client, Partial{task, total, std::move(stream), now});
}

std::optional<SafetensorsStreamDecoder> PartialUploads::Take(const std::string& client, const std::string& task,
                                                             uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  Partial* p = FindLocked(client, task, total);
  if (!p) return std::nullopt;
  SafetensorsStreamDecoder stream = std::move(p->stream);
  DropLocked(client);
  return stream;
}

uint64_t PartialUploads::HeldBytes(const std::string& client, const std::string& task, uint64_t total) {
  std::lock_guard<std::mutex> lock(mu_);
  const Partial* p = FindLocked(client, task, total);
  return p ? p->stream.received() : 0;
}

PartialUploads::Partial* PartialUploads::FindLocked(const std::string& client, const std::string& task,
                                                    uint64_t total) {
  auto it = partial_.find(client);
  if (it == partial_.end() || it->second.task_id != task || it->second.total_bytes != total ||
      it->second.kept_ms + ttl_ms_ < clock_->NowMs()) {
    return nullptr;
  }
  return &it->second;
}

void PartialUploads::DropLocked(const std::string& client) {
  auto it = partial_.find(client);
  if (it == partial_.end()) return;
  bytes_ -= it->second.total_bytes;
  partial_.erase(it);
}

std::map<std::string, PartialUploads::Partial>::iterator PartialUploads::OldestLocked() {
  return std::min_element(partial_.begin(), partial_.end(),
                          [](const auto& a, const auto& b) { return a.second.kept_ms < b.second.kept_ms; });
}

}  // namespace plexus
