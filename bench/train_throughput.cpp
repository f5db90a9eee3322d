// Local training throughput of the client's LibTorch trainer on a TorchScript model: what
// bench/run_train_bench.sh compares with PyTorch in Python (bench/train_throughput.py) on the same
// model file, data file, batch size and thread count. Prints examples per second of the best of
// `repeats` timed runs, each `epochs` passes over the data, after one warm-up pass.
// usage: train_throughput MODEL.pt DATA.safetensors THREADS BATCH EPOCHS REPEATS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "compute/data_files.h"
#include "compute/script_model.h"

int main(int argc, char** argv) {
  using namespace plexus;
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s MODEL.pt DATA.safetensors THREADS BATCH EPOCHS REPEATS\n", argv[0]);
    return 2;
  }
  const int threads = std::atoi(argv[3]);
  Result<Dataset> data = LoadDataFile(argv[2], {});
  Result<ScriptModelInfo> info = ReadScriptModel(argv[1]);
  ScriptTrainerOptions o;
  o.threads = threads;
  Result<std::unique_ptr<Trainer>> trainer = info.ok() ? MakeScriptTrainer(argv[1], o) : info.status();
  if (!data.ok() || !trainer.ok()) {
    std::fprintf(stderr, "%s\n", (!data.ok() ? data.status() : trainer.status()).ToString().c_str());
    return 1;
  }
  TrainOptions t;
  t.batch_size = std::atoi(argv[4]);
  t.learning_rate = 0.01;
  t.momentum = 0.9;
  const DatasetView view = DatasetView::All(*data);
  t.local_epochs = 1;
  if (!(*trainer)->Train(info->initial, view, t).ok()) return 1;  // warm-up
  t.local_epochs = std::atoi(argv[5]);
  double best = 0;
  for (int r = 0; r < std::atoi(argv[6]); ++r) {
    const auto begin = std::chrono::steady_clock::now();
    Result<TrainOutcome> out = (*trainer)->Train(info->initial, view, t);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    if (!out.ok()) {
      std::fprintf(stderr, "%s\n", out.status().ToString().c_str());
      return 1;
    }
    best = std::max(best, static_cast<double>(data->size()) * static_cast<double>(t.local_epochs) / s);
  }
  std::printf("%.1f\n", best);
  return 0;
}
