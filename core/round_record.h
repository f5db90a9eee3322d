// RoundRecord: what the federation records of each published version (the round that made it,
// the updates it merged, its evaluation), as engines produce it, stores persist it and the
// server, the simulator and the summaries report it. Plain data.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace plexus {

// One update merged into a published version: how stale it was and, in semiasync mode, which
// group it arrived with and its client's speed estimate at the time.
struct MergedUpdate {
  std::string client_id;
  std::string task_id;
  uint64_t staleness = 0;               // versions published between its task's start and the merge
  uint64_t group = 0;                   // semiasync group id; 0 for none
  std::optional<double> ms_per_step{};  // semiasync: the client's estimated time per local step
  // Where an edge aggregator hashed the update (issue 41): SHA-256 (lower-case hex) of its values as
  // the edge received them (coded: the codec's bytes; float: ModelState::ContentSha256), so that
  // a root's record lists every client update inside its edges' partial sums, each under its
  // path ("edge-a/c0"). Empty for updates a server took directly (not hashed: a pass per upload).
  std::string update_sha256{};

  friend bool operator==(const MergedUpdate&, const MergedUpdate&) = default;
};

struct RoundRecord {
  uint64_t round = 0;          // 1-based
  uint64_t model_version = 0;  // version published by this round
  std::string model_sha256;    // the checkpoint's ContentSha256 (empty: the store computes it)
  int64_t num_selected = 0;
  int64_t num_updates = 0;  // updates aggregated
  int64_t num_dropped = 0;  // selected clients that missed the deadline
  // Selected clients whose update the server refused (a norm bound, bad values): the round
  // stopped waiting for them, sampled others in their place or closed with what it had.
  int64_t num_refused = 0;
  int64_t num_examples = 0;
  int64_t attempts = 1;  // 1 + rounds abandoned for lack of quorum
  double mean_train_loss = 0.0;
  std::optional<double> test_accuracy;
  std::optional<double> test_loss;
  // Federated evaluation of this version: clients' reports on their held-out data, weighted by
  // their example counts (server/coordinator/federated_evaluation.h).
  std::optional<double> federated_accuracy;
  std::optional<double> federated_loss;
  int64_t federated_examples = 0;
  int64_t federated_clients = 0;
  std::vector<MergedUpdate> merged;  // asynchronous modes: the updates in this version, in merge order
  // Asynchronous modes: the update log entries (Store::LogUpdate) this commit removes: the
  // updates merged into this version and any dropped since the last commit. Not stored itself.
  std::vector<uint64_t> logged_done;
};

}  // namespace plexus
