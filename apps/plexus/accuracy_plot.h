// Plots of test accuracy against round and against virtual time, drawn by gnuplot (Debian's
// gnuplot-nox) from one or several metrics CSV files as `plexus sim --metrics-out` writes them.
// Throw CommandError (CLI edge only).
#pragma once

#include <string>
#include <vector>

namespace plexus::cli {

// Throws CommandError with the install hint when gnuplot is not on the PATH.
void CheckPlotterPresent();

// Writes a PNG with two panels (accuracy by round, by virtual time; the second falls back to
// wall time for runs without virtual time), one line per CSV named after its file.
void PlotAccuracy(const std::vector<std::string>& metrics_csvs, const std::string& png);

}  // namespace plexus::cli
