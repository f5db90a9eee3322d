#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "aggregators/registry.h"
#include "apps/plexus/commands.h"
#include "apps/plexus/help_lists.h"
#include "core/safetensors.h"
#include "core/thread_pool.h"
#include "crdt/crdt_replica.h"

namespace plexus::cli {
namespace {

struct MergeFlags {
  std::string strategy = "fedavg";
  std::vector<double> weights;
  std::string base;
  std::string out;
  std::vector<std::string> inputs;
  int threads = 2;
  bool crdt = false;
};

// --crdt: the files become contributions of one CRDT replica (content-addressed, so a file given
// twice counts once, and resolved in hash order, so the argument order cannot matter; a "dare"
// strategy is seeded from the set). The files carry no signatures of their own: this command
// signs them with a key it makes for the occasion.
ModelState MergeThroughCrdt(const MergeFlags& f, std::vector<ModelState> models, const std::vector<int64_t>& weights,
                            const ModelState& base) {
  const SigningKey key = Take(SigningKey::Generate());
  AuthorKeys keys;
  keys.Add("plexus-merge", key.public_key());
  CrdtReplica replica("plexus-merge", &keys);
  for (size_t i = 0; i < models.size(); ++i) {
    Contribution c;
    c.author = "plexus-merge";
    c.examples = weights[i];
    c.delta = std::move(models[i]);
    if (!f.base.empty()) c.delta.Subtract(base);
    Check(Sign(c, key));
    Take(replica.Add(c), f.inputs[i]);
  }
  ModelState merged = Take(replica.Resolve(f.strategy, base), "--strategy");
  std::printf("CRDT set: %zu distinct contributions of %zu files, root %s\n", replica.LiveIds().size(), f.inputs.size(),
              replica.LiveRoot().c_str());
  return merged;
}

// Weights reach the strategies as example counts; scale them to integers with 6 decimals.
std::vector<int64_t> IntegerWeights(const std::vector<double>& weights, size_t n) {
  if (weights.empty()) return std::vector<int64_t>(n, 1);
  if (weights.size() != n) {
    throw CommandError("--weights has " + std::to_string(weights.size()) + " values for " + std::to_string(n) +
                       " input files");
  }
  std::vector<int64_t> out;
  for (double w : weights) {
    if (!(w > 0) || !std::isfinite(w) || w > 1e12) throw CommandError("--weights must be positive numbers");
    out.push_back(std::max<int64_t>(1, std::llround(w * 1e6)));
  }
  return out;
}

// Inputs [first, first + count) as updates against `*base` (their deltas when --base was given).
// Without --base, `*base` starts empty and becomes zeros shaped like the first input read.
// The files are read on the pool's threads: a read is the kernel's copy out of the page cache
// and a finiteness check, both bound by one core, and a quarter of the merge's time.
std::vector<Update> ReadUpdates(const MergeFlags& f, size_t first, size_t count, const std::vector<int64_t>& weights,
                                std::optional<ModelState>* base, ThreadPool* pool) {
  const std::string& reference_path = f.base.empty() ? f.inputs[0] : f.base;
  std::vector<std::optional<Result<ModelState>>> read(count);
  pool->ParallelFor(
      count,
      [&](size_t begin, size_t end) {
        for (size_t k = begin; k < end; ++k) read[k].emplace(ReadSafetensorsFile(f.inputs[first + k]));
      },
      /*min_chunk=*/1);
  std::vector<Update> updates(count);
  for (size_t k = 0; k < count; ++k) {
    const size_t i = first + k;
    Update& u = updates[k];
    u.delta = Take(std::move(*read[k]));
    if (!*base) {
      *base = ModelState::ZerosLike(u.delta);
      (*base)->set_version(0);
    }
    Status same = u.delta.CheckSameLayout(**base);
    if (!same.ok()) throw CommandError(f.inputs[i] + ": " + same.message() + " (as in " + reference_path + ")");
    u.client_id = f.inputs[i];  // canonical order: by path
    u.task_id = "merge";
    u.num_examples = weights[i];
    u.local_steps = 1;
    if (!f.base.empty()) u.delta.Subtract(**base);
  }
  return updates;
}

// Strategies that fold an update without keeping it (the averaging family) take the files four
// at a time (FoldAll reads four inputs per pass over the sum), so that only four are in memory
// at once and their buffers are reused: the same bits as one Aggregate over all of them, without
// the page faults of holding every file. The others take every file at once (Aggregate).
ModelState MergeFiles(const MergeFlags& f, Aggregator* agg, const std::vector<int64_t>& weights, ThreadPool* pool) {
  std::optional<ModelState> base;
  if (!f.base.empty()) {
    base = Take(ReadSafetensorsFile(f.base));
    base->set_version(0);
  }
  const size_t group = agg->folds_coded() ? 4 : f.inputs.size();
  for (size_t first = 0; first < f.inputs.size(); first += group) {
    std::vector<Update> updates = ReadUpdates(f, first, std::min(group, f.inputs.size() - first), weights, &base, pool);
    std::vector<const Update*> ptrs;
    for (const Update& u : updates) ptrs.push_back(&u);
    if (group == f.inputs.size()) return Take(agg->Aggregate(*base, ptrs));
    if (first == 0) Check(agg->Begin(*base));
    Check(agg->FoldAll(ptrs));
  }
  return Take(agg->Finalize());
}

void RunMerge(const MergeFlags& f) {
  if (f.inputs.empty()) throw CommandError("no input files");
  ThreadPool pool(static_cast<size_t>(f.threads));
  std::unique_ptr<Aggregator> agg = Take(MakeAggregator(f.strategy, &pool), "--strategy");
  const std::vector<int64_t> weights = IntegerWeights(f.weights, f.inputs.size());
  if (f.crdt) {
    std::vector<ModelState> models;
    for (const std::string& path : f.inputs) models.push_back(Take(ReadSafetensorsFile(path)));
    const std::string reference_path = f.base.empty() ? f.inputs[0] : f.base;
    ModelState base = f.base.empty() ? ModelState::ZerosLike(models[0]) : Take(ReadSafetensorsFile(f.base));
    for (size_t i = 0; i < models.size(); ++i) {
      Status same = models[i].CheckSameLayout(base);
      if (!same.ok()) throw CommandError(f.inputs[i] + ": " + same.message() + " (as in " + reference_path + ")");
    }
    base.set_version(0);
    ModelState merged = MergeThroughCrdt(f, std::move(models), weights, base);
    merged.set_version(0);
    Check(WriteSafetensorsFile(f.out, merged));
    std::printf("merged through the CRDT layer with %s into %s (sha256 %s)\n", f.strategy.c_str(), f.out.c_str(),
                merged.ContentSha256().c_str());
    return;
  }
  ModelState merged = MergeFiles(f, agg.get(), weights, &pool);
  merged.set_version(0);
  // The content hash on another thread while the file is written and synced: both are a pass
  // over the model, one bound by the disk, the other by a core.
  std::string sha256;
  {
    std::jthread hash([&] { sha256 = merged.ContentSha256(); });
    Check(WriteSafetensorsFile(f.out, merged));
  }
  std::printf("merged %zu files with %s into %s (%zu parameters, sha256 %s)\n", f.inputs.size(),
              agg->Describe().c_str(), f.out.c_str(), merged.num_params(), sha256.c_str());
}

}  // namespace

void AddMergeCommand(CLI::App& app) {
  auto f = std::make_shared<MergeFlags>();
  CLI::App* cmd = app.add_subcommand("merge", "Merge .safetensors model files with any aggregation strategy");
  cmd->add_option(
         "--strategy", f->strategy,
         "Strategy, " + OneOf(StrategyNames()) + " each with its settings, e.g. krum:f=1, trimmed_mean:beta=0.1")
      ->capture_default_str();
  cmd->add_option("--weights", f->weights, "Weight per input file (default: equal)")->delimiter(',');
  cmd->add_option("--base", f->base,
                  "Model the inputs were fine-tuned from: merge their deltas and add the result to it "
                  "(default: merge the inputs themselves)");
  cmd->add_option("--out", f->out, "Output .safetensors file")->required();
  cmd->add_flag("--crdt", f->crdt,
                "Merge through the CRDT layer: duplicates count once, the result ignores the input order "
                "(docs/crdt.md)");
  cmd->add_option("--threads", f->threads, "Threads")->check(CLI::Range(1, 256))->capture_default_str();
  cmd->add_option("inputs", f->inputs, "Input .safetensors files")->required();
  AddConfigOption(cmd);
  cmd->callback([f] { RunMerge(*f); });
}

}  // namespace plexus::cli
