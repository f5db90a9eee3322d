// FederatedEvaluation: evaluates published versions on the clients' own held-out data, for a
// server that has no data of its own (or as a second opinion beside its test set).
//
// Every `every`-th published version, and the final one, opens a campaign: ceil(fraction x known
// clients) of the known clients, sampled at random (seeded by `seed` and the version), get an
// evaluation task for that version when they next poll, instead of (before) training work. Not
// the first to poll: that over-represented fast devices in every version's result; each reports loss, accuracy and its
// example count; the campaign closes when every task handed out was answered or at its deadline, and its result is the
// example-weighted mean of the reports (reports of zero examples, from clients that hold no evaluation split, count as
// answered and weigh nothing). A client is asked at most once per version. While the final version's campaign is open
// the federation is not finished for clients that still owe or may take its evaluation.
//
// A pure state machine on the caller's clock, like the engines: the server's door drives it under
// its lock, and the same object runs in tests. Thread-compatible.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/evaluation.h"
#include "core/round_record.h"
#include "core/status.h"
#include "core/task.h"

namespace plexus {

struct FederatedEvaluationOptions {
  int64_t every = 0;      // evaluate every V-th version (and the final one); 0: off
  double fraction = 0.5;  // of the known clients, at least one
  int64_t deadline_ms = 60000;
  uint64_t seed = 0;  // the clients' sample, with the version

  // InvalidArgument for a negative period, a fraction outside (0, 1] or a non-positive deadline.
  Status Validate() const;
};

class FederatedEvaluation {
 public:
  explicit FederatedEvaluation(FederatedEvaluationOptions options) : options_(options) {}

  bool enabled() const { return options_.every > 0; }

  // A version was published (`is_final`: the federation's last). Opens its campaign when due,
  // sampling its clients from `known_clients`. Versions at or below one already seen are ignored.
  void OnPublished(uint64_t version, const std::string& sha256, bool is_final, std::vector<std::string> known_clients,
                   int64_t now_ms);
  // Whether `version` (published as the last one when `is_final`) is evaluated by the clients.
  bool Due(uint64_t version, bool is_final) const;

  // Follows an engine's history: OnPublished for each record published since the last call (the
  // last one final once the engine `finished`). `known_clients` is asked only when something was
  // published. Before the first call, Resume tells where the history stood at start.
  void Follow(const std::vector<RoundRecord>& history, bool finished,
              const std::function<std::vector<std::string>()>& known_clients, int64_t now_ms);
  // At start, with the history restored from the store: the versions in it are not evaluated
  // again, except the last one when it was due and has no result (the server stopped while the
  // clients evaluated it), whose campaign opens again: then true.
  bool Resume(const std::vector<RoundRecord>& history, bool finished, std::vector<std::string> known_clients,
              int64_t now_ms);

  // The evaluation task `client_id` should run now, if a campaign wants one from it (the newest
  // open campaign first). Task ids are "eval-v<version>-<client>".
  std::optional<Task> TaskFor(const std::string& client_id, int64_t now_ms);

  // A client's answer to one of its evaluation tasks. NotFound for a task it was not given (or
  // whose campaign closed), InvalidArgument for a non-finite loss or accuracy, an accuracy outside
  // [0, 1] or a negative count; a refused report changes nothing.
  Status Report(const std::string& client_id, const std::string& task_id, const Evaluation& evaluation);

  // Closes the campaigns that are complete or past their deadline and returns their results as
  // round records carrying model_version and the federated_* fields (a campaign without a single
  // example yields none).
  std::vector<RoundRecord> Collect(int64_t now_ms);

  // True while the final version's campaign is open.
  bool final_pending() const;
  // True when `client_id` may still be handed (or owes) an evaluation of the final version: the
  // door does not tell it "finished" yet.
  bool Owes(const std::string& client_id) const;

 private:
  struct Campaign {
    std::string sha256;
    bool is_final = false;
    int64_t wanted = 0;
    int64_t deadline_ms = 0;
    std::set<std::string> chosen;    // the sample: who may be handed a task
    std::set<std::string> asked;     // handed a task
    std::set<std::string> answered;  // reported
    double loss_sum = 0, correct_sum = 0;
    int64_t examples = 0;
    int64_t reporting_clients = 0;  // reports with examples
  };

  FederatedEvaluationOptions options_;
  uint64_t last_seen_ = 0;
  bool seen_any_ = false;
  size_t history_seen_ = 0;            // Follow: history records told
  bool final_told_ = false;            // Follow: the final version was told so
  std::map<uint64_t, Campaign> open_;  // by version
};

}  // namespace plexus
