#include "apps/plexus/accuracy_plot.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "apps/plexus/commands.h"

namespace plexus::cli {
namespace {

// gnuplot takes file names inside double quotes: refuse the characters that would end them.
std::string Quoted(const std::string& s) {
  if (s.find_first_of("\"\\\n`") != std::string::npos) {
    throw CommandError("plot: file name '" + s + "' holds a quote, backslash or newline");
  }
  return "\"" + s + "\"";
}

// The header names of a metrics CSV; CommandError when it cannot be read or lacks a column.
std::vector<std::string> Header(const std::string& csv) {
  std::ifstream in(csv);
  std::string line;
  if (!in || !std::getline(in, line)) throw CommandError("plot: cannot read '" + csv + "'");
  std::vector<std::string> names;
  std::stringstream fields(line);
  for (std::string f; std::getline(fields, f, ',');) names.push_back(f);
  for (const char* needed : {"round", "test_accuracy"}) {
    if (std::find(names.begin(), names.end(), needed) == names.end()) {
      throw CommandError("plot: '" + csv + "' has no column '" + needed + "' (expected a metrics CSV of plexus sim)");
    }
  }
  return names;
}

}  // namespace

void CheckPlotterPresent() {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw CommandError("plotting needs gnuplot: apt-get install gnuplot-nox (scripts/setup.sh installs it)");
  }
}

void PlotAccuracy(const std::vector<std::string>& metrics_csvs, const std::string& png) {
  if (metrics_csvs.empty()) throw CommandError("plot: no metrics files given");
  CheckPlotterPresent();
  bool all_virtual = true;
  for (const std::string& csv : metrics_csvs) {
    const std::vector<std::string> names = Header(csv);
    all_virtual = all_virtual && std::find(names.begin(), names.end(), "virtual_time_s") != names.end();
  }
  const std::string time_column = all_virtual ? "virtual_time_s" : "wall_time_s";
  std::ostringstream gp;
  gp << "set terminal pngcairo size 1400,500 font ',11' noenhanced\n"
     << "set output " << Quoted(png) << "\n"
     << "set datafile separator ','\n"
     << "set key bottom right\nset grid\nset yrange [0:1]\nset ylabel 'test accuracy'\n"
     << "set multiplot layout 1,2\n";
  for (const char* x : {"round", "time"}) {
    const bool by_round = std::string(x) == "round";
    gp << "set xlabel '" << (by_round ? "round" : all_virtual ? "virtual time (s)" : "wall time (s)") << "'\n";
    gp << "plot ";
    for (size_t i = 0; i < metrics_csvs.size(); ++i) {
      const std::string title = std::filesystem::path(metrics_csvs[i]).stem().string();
      gp << (i ? ", " : "") << Quoted(metrics_csvs[i]) << " using '" << (by_round ? "round" : time_column)
         << "':'test_accuracy' with linespoints pointsize 0.5 title " << Quoted(title);
    }
    gp << "\n";
  }
  gp << "unset multiplot\n";
  const std::string script = png + ".gp";
  {
    std::ofstream out(script);
    out << gp.str();
    if (!out) throw CommandError("plot: cannot write '" + script + "'");
  }
  const std::string cmd = "gnuplot " + Quoted(script) + " 2>&1";
  if (std::system(cmd.c_str()) != 0) throw CommandError("plot: gnuplot failed on " + script);
  std::filesystem::remove(script);
}

}  // namespace plexus::cli
