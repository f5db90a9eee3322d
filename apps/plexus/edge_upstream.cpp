#include "apps/plexus/edge_upstream.h"

#include <spdlog/spdlog.h>

#include "aggregators/partial_sum_delta.h"
#include "client/client_runtime.h"
#include "client/failover_transport.h"
#include "compression/codec.h"
#include "server/coordinator/sync_engine.h"

namespace plexus::cli {

EdgeUpstream::EdgeUpstream(UpstreamOptions options, FederationServer* server)
    : options_(std::move(options)), server_(server) {
  transport_ = std::make_unique<FailoverTransport>(
      options_.parents,
      [tls = options_.tls](const std::string& address) { return MakeGrpcFederationTransport(address, tls); },
      options_.failover_after_ms, &clock_);
  thread_ = std::thread([this] { Run(); });
}

EdgeUpstream::~EdgeUpstream() { Stop(); }

void EdgeUpstream::Stop() {
  stop_.store(true);
  transport_->Shutdown();
  if (thread_.joinable()) thread_.join();
}

std::optional<Status> EdgeUpstream::result() {
  std::lock_guard<std::mutex> lock(mu_);
  return result_;
}

void EdgeUpstream::Run() {
  ClientOptions o;
  o.client_id = options_.client_id;
  o.device = "edge aggregator";
  o.give_up_after_ms = options_.give_up_after_ms;
  o.seed = options_.seed;
  o.contribute = [this](const Task& task, const ModelState& model) -> Result<Contribution> {
    auto parent_model = std::make_shared<const ModelState>(model);
    PLEXUS_RETURN_IF_ERROR(server_->WithEngine([&](Engine& e) {
      return static_cast<SyncEngine&>(e).AdoptParentVersion(parent_model, task.round, task.task_id,
                                                            task.hyperparams.local_steps);
    }));
    spdlog::info("upstream task {}: the parent's round {} on its version {}; waiting for this edge's clients",
                 task.task_id, task.round, task.model_version);
    // The round closes on the edge's clients' calls or its deadline (the server's ticker); the
    // wait wakes on either, and every 200 ms to see whether the upstream is stopping.
    while (!stop_.load()) {
      std::optional<SyncEngine::EdgePartial> partial;
      server_->WaitForEngine(
          [&](Engine& e) {
            const SyncEngine::EdgePartial* p = static_cast<SyncEngine&>(e).partial();
            if (p && p->parent_task == task.task_id) partial = *p;
            return partial.has_value();
          },
          /*max_wait_ms=*/200);
      if (partial) {
        spdlog::info("upstream task {}: sending the partial sum of {} updates ({} examples)", task.task_id,
                     partial->sum.count(), partial->num_examples);
        Contribution c;
        c.codec = kPartialSumCodec;
        // With the list of the client updates in it, so that the root's records name each one.
        std::vector<PartialContribution> listed;
        listed.reserve(partial->merged.size());
        for (const MergedUpdate& m : partial->merged) listed.push_back({m.client_id, m.task_id, m.update_sha256});
        if (partial->forwarded) {  // --upstream-forward raw: the updates themselves
          c.codec = kUpdateBundleCodec;
          c.payload = std::make_shared<const std::string>(EncodeUpdateBundle(*partial->forwarded, model.num_params()));
        } else {
          c.payload = std::make_shared<const std::string>(EncodePartialSum(partial->sum, listed));
        }
        c.num_examples = partial->num_examples;
        c.metrics["train_loss"] = partial->mean_train_loss;
        c.metrics["updates"] = static_cast<double>(partial->sum.count());
        return c;
      }
    }
    return CancelledError("stopped");
  };
  ClientRuntime runtime(
      o, transport_.get(),
      [](const std::string&) -> Result<std::unique_ptr<Trainer>> {
        return InternalError("an edge aggregator does not train");
      },
      DatasetView());
  Result<ClientSummary> summary = runtime.Run(&stop_);
  Status ended = summary.status();
  if (ended.ok()) {
    spdlog::info("the parent finished: {} partial sums sent", summary->tasks_completed);
    ended = server_->WithEngine([](Engine& e) {
      static_cast<SyncEngine&>(e).FinishWithParent();
      return Status::Ok();
    });
  } else {
    ended = ended.WithContext("upstream to " + options_.parents.front());
  }
  std::lock_guard<std::mutex> lock(mu_);
  result_ = ended;
}

}  // namespace plexus::cli
