// The CRDT layer's cost: resolving through a CrdtReplica against the bare strategy over the same
// deltas (both measured here, so their ratio is the overhead), verifying and adding one
// contribution (content hash plus Ed25519), and Merkle digest sync against set size.
// bench/run_crdt_bench.sh prints the table for docs/benchmarks.md.
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "aggregators/registry.h"
#include "core/memory_tuning.h"
#include "core/rng.h"
#include "crdt/crdt_replica.h"
#include "crdt/merkle_digest.h"

namespace plexus {
namespace {

struct Fixture {
  AuthorKeys keys;
  std::vector<Contribution> contributions;
  std::vector<std::string> ids;
  ModelState base;
};

const Fixture& Get(size_t n, size_t p) {
  static std::map<std::pair<size_t, size_t>, std::unique_ptr<Fixture>> cache;
  auto& f = cache[{n, p}];
  if (f) return *f;
  f = std::make_unique<Fixture>();
  f->base = *ModelState::Create({{"w", {static_cast<int64_t>(p)}}});
  for (size_t i = 0; i < n; ++i) {
    const SigningKey key = *SigningKey::FromSeed(std::string(31, 's') + static_cast<char>(i));
    Contribution c;
    c.author = std::to_string(i).insert(0, 1, 'a');  // ("a" + ...: GCC 12's false -Wrestrict)
    c.examples = 10;
    c.delta = f->base;
    Rng rng(i);
    for (float& x : c.delta.data()) x = static_cast<float>(rng.Uniform() - 0.5);
    (void)Sign(c, key);
    f->keys.Add(c.author, key.public_key());
    f->ids.push_back(c.Id());
    f->contributions.push_back(std::move(c));
  }
  return *f;
}

void BM_BareMerge(benchmark::State& state, const char* strategy) {
  const Fixture& f = Get(static_cast<size_t>(state.range(0)), static_cast<size_t>(state.range(1)));
  auto agg = *MakeAggregator(strategy, nullptr);
  for (auto _ : state) {
    (void)agg->Begin(f.base);
    for (size_t i = 0; i < f.contributions.size(); ++i) {
      const Contribution& c = f.contributions[i];
      Update u;
      u.client_id = f.ids[i];
      u.num_examples = c.examples;
      u.local_steps = 1;
      u.delta = c.delta;
      (void)agg->Fold(u);
    }
    benchmark::DoNotOptimize(agg->Finalize());
  }
}

void BM_CrdtResolve(benchmark::State& state, const char* strategy) {
  const Fixture& f = Get(static_cast<size_t>(state.range(0)), static_cast<size_t>(state.range(1)));
  CrdtReplica replica("r", &f.keys);
  for (const Contribution& c : f.contributions) (void)replica.Add(c);
  for (auto _ : state) benchmark::DoNotOptimize(replica.Resolve(strategy, f.base));
}

void BM_CrdtVerifyAndAdd(benchmark::State& state) {
  const Fixture& f = Get(1, static_cast<size_t>(state.range(0)));
  for (auto _ : state) {
    CrdtReplica replica("r", &f.keys);
    benchmark::DoNotOptimize(replica.Add(f.contributions[0]));
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * state.range(0) * sizeof(float)));
}

// Two sets of N entries differing in one: digests built on both sides, then the difference found.
void BM_DigestSync(benchmark::State& state) {
  const auto n = static_cast<size_t>(state.range(0));
  std::vector<std::string> mine, theirs;
  for (size_t i = 0; i < n; ++i)
    mine.push_back("+replica-" + std::to_string(i % 100) + "/" + std::to_string(i) + "/id");
  theirs = mine;
  theirs.push_back("+replica-new/1/id");
  size_t hashes = 0;
  for (auto _ : state) benchmark::DoNotOptimize(MissingFrom(MerkleDigest(mine), MerkleDigest(theirs), &hashes));
  state.counters["node_hashes"] = static_cast<double>(hashes);
}

void Sizes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {10, 100}) b->Args({n, 100000});
  b->Args({10, 1000000});
  b->Unit(benchmark::kMillisecond);
}

BENCHMARK_CAPTURE(BM_BareMerge, fedavg, "fedavg")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_CrdtResolve, fedavg, "fedavg")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_BareMerge, median, "median")->Apply(Sizes);
BENCHMARK_CAPTURE(BM_CrdtResolve, median, "median")->Apply(Sizes);
BENCHMARK(BM_CrdtVerifyAndAdd)->Arg(100000)->Arg(1000000)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_DigestSync)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace plexus

int main(int argc, char** argv) {
  plexus::KeepLargeAllocations();  // as the plexus binary does: model-sized buffers stay in the heap
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
