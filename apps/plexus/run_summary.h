// The summary JSON that `plexus sim` and `plexus server` write when a federation finishes, and
// the per-round metrics CSV. A language model's test losses are also given in bits per character
// ("test_bits_per_char"). Plain functions; thread-safe.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/round_record.h"
#include "core/status.h"

namespace plexus::cli {

struct RunSummary {
  std::string mode = "sync";
  std::string model;
  std::string strategy;
  std::string partition;
  int64_t clients = 0;
  int64_t clients_per_round = 0;
  uint64_t seed = 0;
  std::vector<RoundRecord> rounds;
  std::vector<double> round_wall_time_s;     // optional, parallel to rounds
  std::vector<double> round_virtual_time_s;  // simulator only, parallel to rounds
  std::vector<int64_t> round_bytes_down;     // simulator only: model bytes sent so far
  std::vector<int64_t> round_bytes_up;       // simulator only: update bytes received so far
  uint64_t model_version = 0;
  int64_t updates_accepted = 0;
  int64_t updates_refused = 0;
  int64_t updates_stale = 0;  // refused as too stale (async)
  std::string final_model_sha256;
  double wall_time_s = 0.0;
  std::optional<double> virtual_time_s;  // simulator only
  std::optional<int64_t> tasks_trained;  // simulator only
  // Simulator only: polls clients put off after refusals, as ClientSession decides.
  std::optional<int64_t> waits_after_refusals;
  // plexus server only: what crossed its door ("transfers" in the JSON).
  struct Transfers {
    int64_t upload_bytes_received = 0;  // every payload byte that arrived, accepted or not
    int64_t uploads_resumed = 0;        // uploads that continued an interrupted one
    int64_t upload_bytes_resumed = 0;   // bytes those did not send again
    int64_t download_bytes = 0;         // model bytes sent
    // Versions an upload completed: from that upload's last byte to the version served, on
    // average, and its share of the time between served versions (ServerMetrics).
    int64_t versions_timed = 0;
    double after_last_upload_ms = 0;
    double after_last_upload_share = 0;
  };
  std::optional<Transfers> transfers;
  // Simulator with --secagg: what the secure groups cost ("secagg" in the JSON).
  struct SecureAggregation {
    int64_t groups_done = 0, groups_aborted = 0;
    int64_t members_done = 0, members_dropped = 0, members_failed = 0;
    double member_cpu_ms = 0, member_cpu_ms_max = 0, server_call_ms_max = 0, unmask_ms_max = 0;
    double key_bytes_per_member = 0, masked_bytes_per_member = 0;
  };
  std::optional<SecureAggregation> secagg;
  // With --dp: what the releases cost ("dp_*" in the JSON, dp_epsilon per round in both files).
  struct Privacy {
    double epsilon = 0;  // after the last version, at delta (improved conversion)
    double delta = 0;
    double noise_multiplier = 0;
    double clip = 0;             // the starting clip with adaptive clipping
    double sampling_rate = 0;    // 0 for a tree
    std::string mechanism;       // "sampled" (the sampled Gaussian) or "tree" (DP-FTRL)
    int64_t restart = 0;         // tree: versions per tree (0: one tree)
    int64_t participations = 0;  // tree: contributions of a client to a tree at most
    bool adaptive = false;
    std::string noise_source;           // "openssl", or "seeded(seed=N)" in the simulator
    int64_t budget_releases = 0;        // versions --dp-budget allows (0: no budget)
    bool stopped_by_budget = false;     // the federation ended at the budget, before the versions asked
    std::vector<double> round_epsilon;  // parallel to rounds
  };
  std::optional<Privacy> privacy;
  // A language model (ModelChoice::language): its losses are also given in bits per character.
  bool language_model = false;
  // A language model's baseline: the unigram entropy of its test text, bits per character.
  std::optional<double> unigram_bits_per_char;
};

// Writes the summary, with the process's peak resident memory so far as "peak_rss_bytes" and the
// CPU time it has used (user and system, all threads) as "cpu_time_s".
Status WriteSummaryJson(const std::string& path, const RunSummary& summary);
// The process's peak resident set size, in bytes (0 if unknown).
int64_t PeakRssBytes();
// The process's CPU time so far, user and system, in seconds (0 if unknown).
double CpuTimeSeconds();
Status WriteMetricsCsv(const std::string& path, const RunSummary& summary);

}  // namespace plexus::cli
