// federation_load: a load generator for `plexus server`. Runs N lightweight clients in one process
// (a thread each, over the real gRPC transport and client runtime) until the federation finishes;
// their "training" adds 0.001 to every weight (no LibTorch), so what is measured is the server:
// joins, long polls, model downloads, update uploads, validation and aggregation. Prints one JSON
// line with the updates per second, the update bytes ingested per second and the error count.
// With --upload-only the clients skip the client runtime: each joins, polls and uploads one
// pre-encoded delta (encoded once, from the model downloaded once) for every task, so nearly all
// the CPU goes to the server's receiving, decoding, validating and aggregating.
// With --tls-dir DIR every client calls over mutual TLS with its own certificate, DIR/<id>.crt and
// DIR/<id>.key (plexus certs issue --client load-N), trusting DIR/ca.crt.
// usage: federation_load --server HOST:PORT --clients N [--upload-only] [--tls-dir DIR]
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "client/client_runtime.h"
#include "client/grpc_transport.h"
#include "core/file_contents.h"
#include "core/memory_tuning.h"

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

// The delta every --upload-only client sends: 0.001 for every weight of the served model,
// downloaded and encoded by whichever client gets a task first.
class SharedDelta {
 public:
  Result<std::shared_ptr<const Payload>> Get(FederationTransport* transport, uint64_t version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!payload_) {
      ModelDownloadSink sink;
      PLEXUS_RETURN_IF_ERROR(transport->Download(version, &sink));
      PLEXUS_ASSIGN_OR_RETURN(ModelState model, std::move(sink).Finish());
      for (float& x : model.data()) x = 0.001f;
      payload_ = Payload::SafetensorsOf(std::move(model));
    }
    return payload_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<const Payload> payload_;  // guarded by mu_
};

// One --upload-only client: polls and uploads the shared delta until the federation finishes.
Status UploadOnly(const std::string& server, const ClientTls& tls, const std::string& id, SharedDelta* delta,
                  std::atomic<int64_t>* completed, std::atomic<int64_t>* refused) {
  std::unique_ptr<FederationTransport> transport = MakeGrpcFederationTransport(server, tls);
  // The server may still be starting (loading a large --initial-model): retry for a while.
  Status joined = transport->Join(id, 1, "load").status();
  for (int tries = 0; joined.code() == StatusCode::kUnavailable && tries < 100; ++tries) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    joined = transport->Join(id, 1, "load").status();
  }
  PLEXUS_RETURN_IF_ERROR(joined);
  std::optional<PollAnswer> next;  // handed back with the last upload, as the client runtime asks
  for (;;) {
    PollAnswer a;
    if (next) {
      a = *std::exchange(next, std::nullopt);
    } else {
      PLEXUS_ASSIGN_OR_RETURN(a, transport->Poll(id, 30000));
    }
    if (a.kind == PollAnswer::Kind::kFinished) return Status::Ok();
    if (a.kind != PollAnswer::Kind::kTask) continue;
    PLEXUS_ASSIGN_OR_RETURN(std::shared_ptr<const Payload> payload, delta->Get(transport.get(), a.task.model_version));
    UploadHeader h{id, a.task.task_id, a.task.model_version, 1, 1, {}};
    h.want_next_task = true;
    Result<UploadAck> up = transport->Upload(h, payload);
    g_update_bytes += static_cast<int64_t>(payload->size());
    if (up.ok()) {
      next = std::move(up->next);
      ++*completed;
    } else if (up.status().code() == StatusCode::kFailedPrecondition) {
      ++*refused;  // too stale, or the federation finished meanwhile
    } else {
      return up.status();
    }
  }
}

int Main(int argc, char** argv) {
  KeepLargeAllocations();  // as the server does: its threads, too, mostly move model-sized buffers
  ServeFromOneArena();
  std::string server = "127.0.0.1:50051";
  int clients = 10;
  bool upload_only = false;
  std::string tls_dir;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--upload-only"))
      upload_only = true;
    else if (i + 1 < argc && !std::strcmp(argv[i], "--server"))
      server = argv[++i];
    else if (i + 1 < argc && !std::strcmp(argv[i], "--clients"))
      clients = std::atoi(argv[++i]);
    else if (i + 1 < argc && !std::strcmp(argv[i], "--tls-dir"))
      tls_dir = argv[++i];
    else {
      std::fprintf(stderr, "usage: federation_load --server HOST:PORT --clients N [--upload-only] [--tls-dir DIR]\n");
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
  one.features.assign(28 * 28, 0.0f);
  std::atomic<int64_t> completed{0}, refused{0}, errors{0};
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  SharedDelta delta;
  // Each client's credentials, read before any thread starts.
  std::vector<ClientTls> tls(static_cast<size_t>(clients));
  if (!tls_dir.empty()) {
    const auto read = [](const std::string& path) {
      Result<std::string> text = ReadFileContents(path);
      if (!text.ok()) {
        std::fprintf(stderr, "federation_load: %s\n", text.status().ToString().c_str());
        std::exit(2);
      }
      return std::move(text).value();
    };
    const std::string ca = read(tls_dir + "/ca.crt");
    for (int c = 0; c < clients; ++c) {
      const std::string id = "load-" + std::to_string(c);
      tls[static_cast<size_t>(c)] =
          ClientTls{ca, read(tls_dir + "/" + id + ".crt"), read(tls_dir + "/" + id + ".key"), ""};
    }
  }
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      if (upload_only) {
        if (Status s = UploadOnly(server, tls[static_cast<size_t>(c)], "load-" + std::to_string(c), &delta, &completed,
                                  &refused);
            !s.ok()) {
          ++errors;
          spdlog::error("load-{}: {}", c, s.ToString());
        }
        return;
      }
      std::unique_ptr<FederationTransport> transport = MakeGrpcFederationTransport(server, tls[static_cast<size_t>(c)]);
      ClientOptions o;
      o.client_id = "load-" + std::to_string(c);
      o.seed = static_cast<uint64_t>(c);
      o.give_up_after_ms = 120000;
      ClientRuntime runtime(
          o, transport.get(),
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
