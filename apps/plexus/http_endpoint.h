// HttpEndpoint: a small HTTP server on HOST:PORT, on a thread of its own, answering GET (and
// HEAD) on a fixed set of paths with what a callback produces at each request (the server's
// /metrics for Prometheus, its dashboard). Everything else is 404. One request per connection.
// It stays responsive whatever its callers do: a connection has 2 s to send its request and
// 10 s to take the response; at most 128 are open, and a new one closes the oldest still
// sending its request. Callbacks run on its thread, one at a time. Stops when destroyed.
// Thread-safe.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "core/status.h"

namespace plexus::cli {

struct HttpPage {
  std::string content_type;
  std::function<std::string()> body;
};

class HttpEndpoint {
 public:
  // Unavailable (naming the address) when HOST:PORT cannot be bound; port 0 picks a free one.
  static Result<std::unique_ptr<HttpEndpoint>> Start(const std::string& host_port,
                                                     std::map<std::string, HttpPage> pages);
  virtual ~HttpEndpoint() = default;
  virtual int port() const = 0;
};

}  // namespace plexus::cli
