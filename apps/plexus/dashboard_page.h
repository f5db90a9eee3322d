// The server's live dashboard (`plexus server --dashboard-listen HOST:PORT`): one self-contained
// HTML page, rendered at each request from ServerMetrics, with no scripts, fonts or anything
// fetched from elsewhere; it reloads itself every few seconds. Plain function; thread-safe.
#pragma once

#include <string>

#include "server/rpc/federation_server.h"

namespace plexus::cli {

// `title` names the federation (e.g. "sync mode, model mlp, 20 rounds"). Everything that comes
// from clients (their ids) is HTML-escaped.
std::string RenderDashboard(const ServerMetrics& m, const std::string& title, int refresh_s = 5);

}  // namespace plexus::cli
