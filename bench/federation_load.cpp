// federation_load: a load generator for `plexus server`. Runs N lightweight clients in one process
// (a thread each, over the real gRPC transport and client runtime) until the federation finishes;
// their "training" adds 0.001 to every weight (no LibTorch), so what is measured is the server:
// joins, long polls, model downloads, update uploads, validation and aggregation. Prints one JSON
// line with the updates per second, the update bytes ingested per second and the error count.
// usage: federation_load --server HOST:PORT --clients N
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "client/client_runtime.h"
#include "client/grpc_transport.h"

namespace plexus {
namespace {

std::atomic<int64_t> g_update_bytes{0};

class AddConstantTrainer final : public Trainer {
 public:
  Result<TrainOutcome> Train(const ModelState& start, const DatasetView& data, const TrainOptions&) override {
    TrainOutcome out;
    out.weights = start;
    for (float& x : out.weights.data()) x += 0.001f;
    out.num_examples = static_cast<int64_t>(data.size());
    out.steps = 1;
    out.mean_loss = 1.0;
    g_update_bytes += static_cast<int64_t>(start.num_bytes());
    return out;
  }
  Result<Evaluation> Evaluate(const ModelState&, const DatasetView&) override { return Evaluation{}; }
};

int Main(int argc, char** argv) {
  std::string server = "127.0.0.1:50051";
  int clients = 10;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--server")) server = argv[i + 1];
    else if (!std::strcmp(argv[i], "--clients")) clients = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: federation_load --server HOST:PORT --clients N\n");
      return 2;
    }
  }
  if (clients <= 0) {
    std::fprintf(stderr, "federation_load: --clients must be positive\n");
    return 2;
  }
  // stdout carries the result line only; the clients' warnings (refused updates) go to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("load"));
  spdlog::set_level(spdlog::level::warn);
  Dataset one;
  one.labels = {0};
  one.pixels.assign(28 * 28, 0.0f);
  std::atomic<int64_t> completed{0}, refused{0}, errors{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      std::unique_ptr<FederationTransport> transport = MakeGrpcFederationTransport(server);
      ClientOptions o;
      o.client_id = "load-" + std::to_string(c);
      o.seed = static_cast<uint64_t>(c);
      o.give_up_after_ms = 120000;
      ClientRuntime runtime(o, transport.get(),
                            [](const std::string&) -> Result<std::unique_ptr<Trainer>> {
                              return std::unique_ptr<Trainer>(std::make_unique<AddConstantTrainer>());
                            },
                            DatasetView::All(one));
      Result<ClientSummary> r = runtime.Run();
      if (!r.ok()) {
        ++errors;
        spdlog::error("{}: {}", o.client_id, r.status().ToString());
        return;
      }
      completed += r->tasks_completed;
      refused += r->tasks_refused;
    });
  }
  for (std::thread& t : threads) t.join();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"clients\": %d, \"updates\": %lld, \"refused\": %lld, \"errors\": %lld, \"wall_s\": %.3f, "
      "\"updates_per_s\": %.1f, \"update_bytes\": %lld, \"update_bytes_per_s\": %.0f}\n",
      clients, static_cast<long long>(completed.load()), static_cast<long long>(refused.load()),
      static_cast<long long>(errors.load()), wall, static_cast<double>(completed.load()) / wall,
      static_cast<long long>(g_update_bytes.load()), static_cast<double>(g_update_bytes.load()) / wall);
  return errors.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace plexus

int main(int argc, char** argv) { return plexus::Main(argc, argv); }
