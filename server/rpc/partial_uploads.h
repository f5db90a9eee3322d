// PartialUploads: what arrived of interrupted uploads, kept so that a client's retry resumes
// where its upload stopped instead of sending everything again. At most one per client (a newer
// one replaces it), `budget_bytes` in all counted at the full update size (the oldest go first),
// each for `ttl_ms` of the injected clock. Only uploads of known clients for their own tasks get
// here: the server keeps them after the header and the task have been checked. Thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/safetensors.h"

namespace plexus {

class PartialUploads {
 public:
  PartialUploads(const Clock* clock, size_t budget_bytes = size_t{1} << 30, int64_t ttl_ms = 10 * 60 * 1000)
      : clock_(clock), budget_bytes_(budget_bytes), ttl_ms_(ttl_ms) {}

  // Keeps what arrived of `client`'s upload for `task` (of `total` bytes), replacing the
  // client's earlier one. Nothing is kept for an empty stream or one over the whole budget.
  void Keep(const std::string& client, const std::string& task, uint64_t total, SafetensorsStreamDecoder stream);
  // Hands back (and forgets) the client's partial upload when it is for `task` and `total`
  // bytes and has not expired.
  std::optional<SafetensorsStreamDecoder> Take(const std::string& client, const std::string& task, uint64_t total);
  // How many bytes of that upload are held (0 when none matches).
  uint64_t HeldBytes(const std::string& client, const std::string& task, uint64_t total);

 private:
  struct Partial {
    std::string task_id;
    uint64_t total_bytes = 0;  // what it holds once its header is in (the model is laid out whole)
    SafetensorsStreamDecoder stream;
    int64_t kept_ms = 0;
  };
  // The client's partial upload for `task` and `total` that has not expired; null otherwise.
  Partial* FindLocked(const std::string& client, const std::string& task, uint64_t total);
  void DropLocked(const std::string& client);
  std::map<std::string, Partial>::iterator OldestLocked();

  const Clock* const clock_;
  const size_t budget_bytes_;
  const int64_t ttl_ms_;
  std::mutex mu_;
  std::map<std::string, Partial> partial_;  // guarded by mu_; by client id
  size_t bytes_ = 0;                        // guarded by mu_
};

}  // namespace plexus
