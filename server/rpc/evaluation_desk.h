// EvaluationDesk: the door's side of federated evaluation. It knows what every client declared
// at join (the cap on the examples it may report), follows the versions the engine publishes with
// their evaluation campaigns, turns a poll into an evaluation task when a campaign wants one from
// the client, checks and records the clients' reports, and stores and keeps the campaigns'
// results. Owned by the federation service; thread-compatible (the service's lock guards it).
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/clock.h"
#include "core/status.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/federated_evaluation.h"
#include "server/store/store.h"

namespace plexus {

class EvaluationDesk {
 public:
  // Reads the clients that joined before a restart from `store`; reopens the campaign of a last
  // version the clients were evaluating when the server stopped. Borrowed pointers outlive it.
  EvaluationDesk(FederatedEvaluationOptions options, Engine* engine, Store* store, const Clock* clock);

  // A client joined (again) declaring `examples` training examples.
  void Declare(const std::string& client_id, int64_t examples);
  // What the client is to do next: an evaluation task when a campaign wants one from it, else the
  // engine's answer, except that a client that may still owe the final version's evaluation hears
  // "wait" rather than "finished".
  Result<PollAnswer> Poll(const std::string& client_id);
  // A client's evaluation of task `task_id`: InvalidArgument when it counts more examples than the
  // client can hold out (nine times what it declared, --federated-eval-split being at most 0.9), else the
  // campaign's answer. Closed campaigns are stored.
  Status Report(const std::string& client_id, const std::string& task_id, const Evaluation& evaluation);

  // Follows the versions published since the last look and stores the campaigns that closed.
  void Update();
  // The closed campaigns' results by version (after Update).
  const std::map<uint64_t, RoundRecord>& results() const { return results_; }
  // Whether the final version's campaign is still open.
  bool final_pending() const { return federated_.final_pending(); }
  // The last closed campaign's version and accuracy into `status`.
  void FillStatus(EngineStatus* status) const;

 private:
  std::vector<std::string> KnownClients() const;
  void Collect();

  Engine* const engine_;
  Store* const store_;
  const Clock* const clock_;
  FederatedEvaluation federated_;
  std::map<uint64_t, RoundRecord> results_;  // closed campaigns by version
  std::map<std::string, int64_t> declared_;  // training examples declared at join
};

}  // namespace plexus
