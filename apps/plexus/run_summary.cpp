#include "apps/plexus/run_summary.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "compute/text_corpus.h"

namespace plexus::cli {
namespace {

Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) return InvalidArgumentError("cannot write '" + path + "': " + std::strerror(errno));
  out << text;
  if (!out) return InternalError("short write to '" + path + "'");
  return Status::Ok();
}

}  // namespace

int64_t PeakRssBytes() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0;
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports kilobytes
}

double CpuTimeSeconds() {
  struct rusage usage {};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

Status WriteSummaryJson(const std::string& path, const RunSummary& s) {
  nlohmann::json j;
  j["mode"] = s.mode;
  j["model"] = s.model;
  j["strategy"] = s.strategy;
  if (!s.partition.empty()) j["partition"] = s.partition;
  j["clients"] = s.clients;
  j["clients_per_round"] = s.clients_per_round;
  j["seed"] = s.seed;
  j["rounds_completed"] = s.rounds.size();
  j["model_version"] = s.model_version;
  j["updates_accepted"] = s.updates_accepted;
  j["updates_refused"] = s.updates_refused;
  j["updates_stale"] = s.updates_stale;
  j["final_model_sha256"] = s.final_model_sha256;
  j["wall_time_s"] = s.wall_time_s;
  j["peak_rss_bytes"] = PeakRssBytes();
  j["cpu_time_s"] = CpuTimeSeconds();
  if (s.virtual_time_s) j["virtual_time_s"] = *s.virtual_time_s;
  if (s.tasks_trained) j["tasks_trained"] = *s.tasks_trained;
  if (s.waits_after_refusals) j["waits_after_refusals"] = *s.waits_after_refusals;
  if (s.transfers) {
    j["transfers"] = {{"upload_bytes_received", s.transfers->upload_bytes_received},
                      {"uploads_resumed", s.transfers->uploads_resumed},
                      {"upload_bytes_resumed", s.transfers->upload_bytes_resumed},
                      {"download_bytes", s.transfers->download_bytes}};
    if (s.transfers->versions_timed > 0) {
      j["transfers"]["after_last_upload"] = {{"versions", s.transfers->versions_timed},
                                             {"mean_ms", s.transfers->after_last_upload_ms},
                                             {"share_of_version_interval", s.transfers->after_last_upload_share}};
    }
  }
  if (s.secagg) {
    const RunSummary::SecureAggregation& g = *s.secagg;
    j["secagg"] = {{"groups_published", g.groups_done},
                   {"groups_aborted", g.groups_aborted},
                   {"members_finished", g.members_done},
                   {"members_dropped", g.members_dropped},
                   {"members_left_out", g.members_failed},
                   {"member_cpu_ms_mean", g.member_cpu_ms},
                   {"member_cpu_ms_max", g.member_cpu_ms_max},
                   {"server_call_ms_max", g.server_call_ms_max},
                   {"unmask_ms_max", g.unmask_ms_max},
                   {"key_bytes_per_member", g.key_bytes_per_member},
                   {"masked_bytes_per_member", g.masked_bytes_per_member}};
  }
  if (s.privacy) {
    const RunSummary::Privacy& p = *s.privacy;
    j["dp_epsilon"] = std::isfinite(p.epsilon) ? nlohmann::json(p.epsilon) : nlohmann::json();  // null: not private
    j["dp_delta"] = p.delta;
    j["dp_noise_multiplier"] = p.noise_multiplier;
    j["dp_clip"] = p.clip;
    j["dp_sampling_rate"] = p.sampling_rate;
    j["dp_adaptive_clip"] = p.adaptive;
    j["dp_mechanism"] = p.mechanism;
    if (p.mechanism == "tree") {
      j["dp_tree_restart"] = p.restart;
      j["dp_tree_participations"] = p.participations;
    }
    j["dp_noise_source"] = p.noise_source;
    j["dp_budget_releases"] = p.budget_releases;
    j["dp_stopped_by_budget"] = p.stopped_by_budget;
  }
  j["final_test_accuracy"] = nullptr;
  j["final_test_loss"] = nullptr;
  // A language model's losses are per predicted byte; its accuracy is the next byte's.
  const bool language = s.language_model;
  if (language) {
    j["final_test_bits_per_char"] = nullptr;
    if (s.unigram_bits_per_char) j["unigram_bits_per_char"] = *s.unigram_bits_per_char;
  }
  bool any_federated = false;
  nlohmann::json rounds = nlohmann::json::array();
  for (size_t i = 0; i < s.rounds.size(); ++i) {
    const RoundRecord& r = s.rounds[i];
    nlohmann::json row = {{"round", r.round},           {"model_version", r.model_version},
                          {"updates", r.num_updates},   {"dropped", r.num_dropped},
                          {"examples", r.num_examples}, {"train_loss", r.mean_train_loss}};
    row["refused"] = r.num_refused;
    row["test_accuracy"] = r.test_accuracy ? nlohmann::json(*r.test_accuracy) : nlohmann::json();
    row["test_loss"] = r.test_loss ? nlohmann::json(*r.test_loss) : nlohmann::json();
    if (language && r.test_loss) row["test_bits_per_char"] = BitsPerChar(*r.test_loss);
    if (r.federated_accuracy) {
      row["federated_test_accuracy"] = *r.federated_accuracy;
      row["federated_test_loss"] = *r.federated_loss;
      row["federated_examples"] = r.federated_examples;
      row["federated_clients"] = r.federated_clients;
      j["federated_test_accuracy"] = *r.federated_accuracy;  // the newest evaluated version's
      j["federated_test_loss"] = *r.federated_loss;
      j["federated_test_version"] = r.model_version;
      any_federated = true;
    }
    if (i < s.round_wall_time_s.size()) row["wall_time_s"] = s.round_wall_time_s[i];
    if (i < s.round_virtual_time_s.size()) row["virtual_time_s"] = s.round_virtual_time_s[i];
    if (i < s.round_bytes_down.size()) row["bytes_down"] = s.round_bytes_down[i];
    if (i < s.round_bytes_up.size()) row["bytes_up"] = s.round_bytes_up[i];
    if (s.privacy && i < s.privacy->round_epsilon.size() && std::isfinite(s.privacy->round_epsilon[i])) {
      row["dp_epsilon"] = s.privacy->round_epsilon[i];
    }
    if (!r.merged.empty()) {
      double staleness = 0.0;
      for (const MergedUpdate& m : r.merged) staleness += static_cast<double>(m.staleness);
      row["mean_staleness"] = staleness / static_cast<double>(r.merged.size());
      // The client updates inside edges' partial sums, each with the hash its edge took of it
      // (a flat server's own updates are not hashed, and not listed here).
      nlohmann::json contributions = nlohmann::json::array();
      for (const MergedUpdate& m : r.merged) {
        if (m.update_sha256.empty()) continue;
        contributions.push_back({{"client", m.client_id}, {"task", m.task_id}, {"update_sha256", m.update_sha256}});
      }
      if (!contributions.empty()) row["contributions"] = std::move(contributions);
    }
    rounds.push_back(row);
    if (r.test_accuracy) {
      j["final_test_accuracy"] = *r.test_accuracy;
      j["final_test_loss"] = *r.test_loss;
      if (language) j["final_test_bits_per_char"] = BitsPerChar(*r.test_loss);
    }
  }
  if (!any_federated) j["federated_test_accuracy"] = nullptr;
  j["rounds"] = rounds;
  return WriteFile(path, j.dump(2) + "\n");
}

Status WriteMetricsCsv(const std::string& path, const RunSummary& s) {
  std::string csv =
      "round,model_version,updates,dropped,examples,train_loss,test_accuracy,test_loss,wall_time_s,virtual_time_s,"
      "bytes_down,bytes_up,mean_staleness,federated_test_accuracy,federated_test_loss,federated_examples,dp_epsilon,"
      "test_bits_per_char\n";
  const bool language = s.language_model;
  for (size_t i = 0; i < s.rounds.size(); ++i) {
    const RoundRecord& r = s.rounds[i];
    char line[512];
    // The mean staleness (0 in sync mode) of the updates merged into the version (as in the JSON).
    std::string staleness;
    if (!r.merged.empty()) {
      double sum = 0.0;
      for (const MergedUpdate& m : r.merged) sum += static_cast<double>(m.staleness);
      staleness = std::to_string(sum / static_cast<double>(r.merged.size()));
    }
    std::string federated = ",,";
    if (r.federated_accuracy) {
      federated = std::to_string(*r.federated_accuracy) + "," + std::to_string(*r.federated_loss) + "," +
                  std::to_string(r.federated_examples);
    }
    std::string epsilon;  // empty without DP, or when the releases are not private (no noise)
    if (s.privacy && i < s.privacy->round_epsilon.size() && std::isfinite(s.privacy->round_epsilon[i])) {
      epsilon = std::to_string(s.privacy->round_epsilon[i]);
    }
    // Empty unless the model is a language model (its test loss in bits per byte).
    const std::string bits = language && r.test_loss ? std::to_string(BitsPerChar(*r.test_loss)) : "";
    std::snprintf(line, sizeof line, "%llu,%llu,%lld,%lld,%lld,%.6f,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n",
                  static_cast<unsigned long long>(r.round), static_cast<unsigned long long>(r.model_version),
                  static_cast<long long>(r.num_updates), static_cast<long long>(r.num_dropped),
                  static_cast<long long>(r.num_examples), r.mean_train_loss,
                  r.test_accuracy ? std::to_string(*r.test_accuracy).c_str() : "",
                  r.test_loss ? std::to_string(*r.test_loss).c_str() : "",
                  i < s.round_wall_time_s.size() ? std::to_string(s.round_wall_time_s[i]).c_str() : "",
                  i < s.round_virtual_time_s.size() ? std::to_string(s.round_virtual_time_s[i]).c_str() : "",
                  i < s.round_bytes_down.size() ? std::to_string(s.round_bytes_down[i]).c_str() : "",
                  i < s.round_bytes_up.size() ? std::to_string(s.round_bytes_up[i]).c_str() : "", staleness.c_str(),
                  federated.c_str(), epsilon.c_str(), bits.c_str());
    csv += line;
  }
  return WriteFile(path, csv);
}

}  // namespace plexus::cli
