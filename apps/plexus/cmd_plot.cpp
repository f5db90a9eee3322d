// `plexus plot`: accuracy curves of one or several runs from their metrics CSV files.
#include <cstdio>

#include "apps/plexus/accuracy_plot.h"
#include "apps/plexus/commands.h"

namespace plexus::cli {

void AddPlotCommand(CLI::App& app) {
  struct PlotFlags {
    std::vector<std::string> inputs;
    std::string out = "accuracy.png";
  };
  auto flags = std::make_shared<PlotFlags>();
  CLI::App* cmd =
      app.add_subcommand("plot", "Draw test accuracy against round and virtual time for one or several runs (gnuplot)");
  cmd->add_option("metrics", flags->inputs, "Metrics CSV files (plexus sim --metrics-out)")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", flags->out, "PNG to write")->capture_default_str();
  cmd->callback([flags] {
    PlotAccuracy(flags->inputs, flags->out);
    std::printf("plot of %zu run(s) written to %s\n", flags->inputs.size(), flags->out.c_str());
  });
}

}  // namespace plexus::cli
