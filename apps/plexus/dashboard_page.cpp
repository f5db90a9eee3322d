#include "apps/plexus/dashboard_page.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace plexus::cli {
namespace {

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string Fixed(double v, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Test accuracy against version as an SVG line with a point per evaluated version.
std::string AccuracyChart(const std::vector<std::pair<uint64_t, double>>& points) {
  const double w = 640, h = 240, pad = 36;
  std::ostringstream svg;
  svg << "<svg id=\"accuracy-chart\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << ' ' << h
      << "\" role=\"img\" aria-label=\"test accuracy by version\">"
      << "<rect x=\"0\" y=\"0\" width=\"" << w << "\" height=\"" << h << "\" fill=\"#fff\" stroke=\"#ccc\"/>";
  for (double y : {0.0, 0.25, 0.5, 0.75, 1.0}) {  // grid and axis labels
    const double py = h - pad - y * (h - 2 * pad);
    svg << "<line x1=\"" << pad << "\" x2=\"" << w - pad / 2 << "\" y1=\"" << py << "\" y2=\"" << py
        << "\" stroke=\"#eee\"/><text x=\"4\" y=\"" << py + 4 << "\" font-size=\"11\">" << Fixed(y, 2) << "</text>";
  }
  if (points.empty()) {
    svg << "<text x=\"" << w / 2 - 80 << "\" y=\"" << h / 2 << "\" font-size=\"13\">no evaluated version yet</text>";
  } else {
    const double last = static_cast<double>(std::max<uint64_t>(points.back().first, 1));
    std::ostringstream line;
    for (const auto& [version, accuracy] : points) {
      const double px = pad + static_cast<double>(version) / last * (w - 1.5 * pad);
      const double py = h - pad - std::clamp(accuracy, 0.0, 1.0) * (h - 2 * pad);
      line << px << ',' << py << ' ';
      svg << "<circle class=\"accuracy-point\" data-version=\"" << version << "\" data-accuracy=\"" << Fixed(accuracy)
          << "\" cx=\"" << px << "\" cy=\"" << py << "\" r=\"3\" fill=\"#1f77b4\"><title>version " << version << ": "
          << Fixed(accuracy) << "</title></circle>";
    }
    svg << "<polyline points=\"" << line.str() << "\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"2\"/>";
    svg << "<text x=\"" << w - 2 * pad << "\" y=\"" << h - 8 << "\" font-size=\"11\">version " << points.back().first
        << "</text>";
  }
  svg << "</svg>";
  return svg.str();
}

}  // namespace

std::string RenderDashboard(const ServerMetrics& m, const std::string& title, int refresh_s) {
  const EngineStatus& e = m.engine;
  std::ostringstream html;
  html << "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\">"
       << "<meta http-equiv=\"refresh\" content=\"" << refresh_s << "\">"
       << "<title>plexus server: version " << e.model_version << "</title>"
       << "<style>body{font-family:sans-serif;margin:24px;color:#222}table{border-collapse:collapse;margin:8px 0 20px}"
       << "td,th{border:1px solid #ddd;padding:4px 10px;text-align:left}th{background:#f4f4f4}"
       << ".big{font-size:28px;font-weight:bold}</style></head><body>";
  html << "<h1>plexus server</h1><p>" << Escape(title) << "</p>";
  html << "<p class=\"big\" id=\"progress\">" << (e.finished ? "finished at " : "") << "version <span id=\"version\">"
       << e.model_version << "</span>, round " << e.round << "</p>";
  if (!e.error.empty()) html << "<p style=\"color:#b00\" id=\"error\">store error: " << Escape(e.error) << "</p>";
  html << "<h2>Test accuracy</h2>" << AccuracyChart(m.accuracy);
  if (e.last_accuracy) html << "<p>latest: <span id=\"last-accuracy\">" << Fixed(*e.last_accuracy) << "</span></p>";
  html << "<h2>Clients</h2><table id=\"clients\"><tr><th>known</th><th>connected</th><th>holding a task</th>"
       << "<th>updates waiting</th><th>accepted</th><th>refused</th><th>too stale</th></tr><tr><td>" << e.known_clients
       << "</td><td>" << e.connected_clients << "</td><td>" << e.round_selected << "</td><td>" << e.round_received
       << "</td><td>" << e.updates_accepted << "</td><td>" << e.updates_refused << "</td><td>" << e.updates_stale
       << "</td></tr></table>";
  if (!e.schedule.empty()) {
    html << "<table id=\"schedule\"><tr><th>client</th><th>ms per step</th><th>local steps</th><th>group</th></tr>";
    for (const ClientSchedule& c : e.schedule) {
      html << "<tr><td>" << Escape(c.client_id) << "</td><td>" << (c.ms_per_step ? Fixed(*c.ms_per_step, 1) : "-")
           << "</td><td>" << c.local_steps << "</td><td>" << c.group << "</td></tr>";
    }
    html << "</table>";
  }
  html << "<h2>Refused calls</h2><table id=\"refusals\"><tr><th>reason</th><th>calls</th></tr>";
  if (m.refusals.empty()) html << "<tr><td colspan=\"2\">none</td></tr>";
  for (const auto& [code, n] : m.refusals) html << "<tr><td>" << Escape(code) << "</td><td>" << n << "</td></tr>";
  html << "</table>";
  if (m.last_round) {
    const RoundRecord& r = *m.last_round;
    html << "<h2>Last version</h2><table id=\"last-round\"><tr><th>version</th><th>updates</th><th>dropped</th>"
         << "<th>examples</th><th>train loss</th></tr><tr><td>" << r.model_version << "</td><td>" << r.num_updates
         << "</td><td>" << r.num_dropped << "</td><td>" << r.num_examples << "</td><td>" << Fixed(r.mean_train_loss)
         << "</td></tr></table>";
    if (!r.merged.empty()) {
      html << "<table id=\"merged\"><tr><th>merged update</th><th>client</th><th>staleness</th></tr>";
      for (const MergedUpdate& u : r.merged) {
        html << "<tr><td>" << Escape(u.task_id) << "</td><td>" << Escape(u.client_id) << "</td><td>" << u.staleness
             << "</td></tr>";
      }
      html << "</table>";
    }
  }
  html << "<p style=\"color:#888\">refreshes every " << refresh_s << " s</p></body></html>\n";
  return html.str();
}

}  // namespace plexus::cli
