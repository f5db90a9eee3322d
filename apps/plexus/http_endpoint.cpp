#include "apps/plexus/http_endpoint.h"

#include <httplib.h>

#include <thread>

namespace plexus::cli {
namespace {

class HttplibEndpoint final : public HttpEndpoint {
 public:
  explicit HttplibEndpoint(std::map<std::string, HttpPage> pages) : pages_(std::move(pages)) {
    for (const auto& [path, page] : pages_) {
      server_.Get(path, [&page = page](const httplib::Request&, httplib::Response& res) {
        res.set_content(page.body(), page.content_type.c_str());
      });
    }
  }
  ~HttplibEndpoint() override {
    server_.stop();
    if (thread_.joinable()) thread_.join();
  }

  Status Listen(const std::string& host, int port) {
    port_ = port == 0 ? server_.bind_to_any_port(host) : (server_.bind_to_port(host, port) ? port : -1);
    if (port_ <= 0) return UnavailableError("cannot listen on " + host + ":" + std::to_string(port));
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    return Status::Ok();
  }
  int port() const override { return port_; }

 private:
  const std::map<std::string, HttpPage> pages_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = -1;
};

}  // namespace

Result<std::unique_ptr<HttpEndpoint>> HttpEndpoint::Start(const std::string& host_port,
                                                          std::map<std::string, HttpPage> pages) {
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos) return InvalidArgumentError("'" + host_port + "' is not HOST:PORT");
  std::string host = host_port.substr(0, colon);
  if (host.size() > 1 && host.front() == '[') host = host.substr(1, host.size() - 2);
  int port = 0;
  try {
    port = std::stoi(host_port.substr(colon + 1));
  } catch (const std::exception&) {
    return InvalidArgumentError("'" + host_port + "' has no port number");
  }
  auto endpoint = std::make_unique<HttplibEndpoint>(std::move(pages));
  PLEXUS_RETURN_IF_ERROR(endpoint->Listen(host, port));
  return std::unique_ptr<HttpEndpoint>(std::move(endpoint));
}

}  // namespace plexus::cli
