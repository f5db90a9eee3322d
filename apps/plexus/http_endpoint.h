// HttpEndpoint: a small HTTP server (Debian's cpp-httplib) on HOST:PORT, on a thread of its own,
// answering GET on a fixed set of paths with what a callback produces at each request (the
// server's /metrics for Prometheus). Everything else is 404. Stops when destroyed. Thread-safe.
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
