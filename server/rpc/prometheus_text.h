// The server's metrics in the Prometheus text exposition format (version 0.0.4), for
// `plexus server --metrics-listen`: versions and rounds, updates accepted and refused by reason,
// bytes in and out, an upload-duration histogram, clients, staleness and resident memory.
// Stateless; thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "server/rpc/federation_server.h"

namespace plexus {

std::string PrometheusText(const ServerMetrics& m, int64_t resident_bytes);

// This process's resident set size in bytes (from /proc/self/statm; 0 where unreadable).
int64_t ResidentBytes();

}  // namespace plexus
