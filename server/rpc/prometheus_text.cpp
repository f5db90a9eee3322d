#include "server/rpc/prometheus_text.h"

#include <fmt/format.h>
#include <unistd.h>

#include <fstream>
#include <iterator>

namespace plexus {
namespace {

// One metric: its HELP and TYPE lines and a sample without labels.
void Metric(std::string* out, const char* name, const char* type, const char* help, double value) {
  *out += fmt::format("# HELP {} {}\n# TYPE {} {}\n{} {}\n", name, help, name, type, name, value);
}

}  // namespace

std::string PrometheusText(const ServerMetrics& m, int64_t resident_bytes) {
  std::string out;
  const EngineStatus& e = m.engine;
  struct Line {
    const char* name;
    const char* type;
    const char* help;
    double value;
  };
  const Line engine_lines[] = {
      {"plexus_model_version", "gauge", "Newest published model version.", static_cast<double>(e.model_version)},
      {"plexus_round", "gauge", "Round in progress (sync mode) or last round.", static_cast<double>(e.round)},
      {"plexus_finished", "gauge", "1 once the federation has finished.", e.finished ? 1.0 : 0.0},
      {"plexus_known_clients", "gauge", "Clients that ever joined.", static_cast<double>(e.known_clients)},
      {"plexus_connected_clients", "gauge", "Clients heard from within the client timeout.",
       static_cast<double>(e.connected_clients)},
      {"plexus_updates_waiting", "gauge", "Updates accepted and waiting to be aggregated.",
       static_cast<double>(e.round_received)},
      {"plexus_updates_accepted_total", "counter", "Updates accepted since the server started.",
       static_cast<double>(e.updates_accepted)},
      {"plexus_updates_refused_total", "counter", "Updates the engine refused since the server started.",
       static_cast<double>(e.updates_refused)},
      {"plexus_updates_stale_total", "counter", "Updates refused as too stale (async modes).",
       static_cast<double>(e.updates_stale)},
      {"plexus_aggregates_nonfinite_total", "counter", "Aggregates not published because not finite.",
       static_cast<double>(e.aggregates_nonfinite)},
  };
  for (const Line& l : engine_lines) Metric(&out, l.name, l.type, l.help, l.value);
  out += "# HELP plexus_refused_calls_total Calls refused at the door, by gRPC status code.\n";
  out += "# TYPE plexus_refused_calls_total counter\n";
  for (const auto& [code, count] : m.refusals)
    out += fmt::format("plexus_refused_calls_total{{code=\"{}\"}} {}\n", code, count);
  Metric(&out, "plexus_uploads_resumed_total", "counter", "Uploads that continued an interrupted one.",
         static_cast<double>(m.uploads_resumed));
  Metric(&out, "plexus_upload_resumed_bytes_total", "counter",
         "Bytes that resumed uploads did not send again (the offsets they continued from).",
         static_cast<double>(m.upload_bytes_resumed));
  Metric(&out, "plexus_upload_bytes_total", "counter", "Payload bytes of accepted updates.",
         static_cast<double>(m.upload_bytes));
  Metric(&out, "plexus_upload_received_bytes_total", "counter",
         "Payload bytes that arrived in uploads, accepted or not (with resumes and refusals).",
         static_cast<double>(m.received_upload_bytes));
  Metric(&out, "plexus_download_bytes_total", "counter", "Model bytes sent to clients.",
         static_cast<double>(m.download_bytes));
  out += "# HELP plexus_upload_seconds Time from an upload's first chunk to its acknowledgement.\n";
  out += "# TYPE plexus_upload_seconds histogram\n";
  for (size_t i = 0; i < std::size(ServerMetrics::kUploadSecondsBounds); ++i) {
    const int64_t count = i < m.upload_seconds_le.size() ? m.upload_seconds_le[i] : 0;
    out += fmt::format("plexus_upload_seconds_bucket{{le=\"{}\"}} {}\n", ServerMetrics::kUploadSecondsBounds[i], count);
  }
  out += fmt::format("plexus_upload_seconds_bucket{{le=\"+Inf\"}} {}\n", m.upload_count);
  out += fmt::format("plexus_upload_seconds_sum {}\nplexus_upload_seconds_count {}\n", m.upload_seconds_sum,
                     m.upload_count);
  if (e.last_accuracy) {
    Metric(&out, "plexus_last_test_accuracy", "gauge", "Test accuracy of the newest evaluated version.",
           *e.last_accuracy);
  }
  Metric(&out, "plexus_resident_memory_bytes", "gauge", "Resident memory of the server process.",
         static_cast<double>(resident_bytes));
  return out;
}

int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  if (!(statm >> size >> resident)) return 0;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace plexus
