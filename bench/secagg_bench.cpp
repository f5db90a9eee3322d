// Secure aggregation's cost (privacy/secagg.h), against the floor of the same run: the ChaCha20
// keystream a mask of the same length takes. A member's CPU for one round beyond training
// (advertise, share keys, encode, mask, unmask) with its k neighbours, and the server's unmasking
// for n members of which 10% dropped after sharing keys (the costly case: their pairwise masks
// come off the sum one by one). bench/run_secagg_bench.sh prints the table for docs/privacy.md.
#include <benchmark/benchmark.h>

#include <cmath>
#include <map>
#include <memory>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "privacy/fixed_point.h"
#include "privacy/secagg.h"

namespace plexus::secagg {
namespace {

constexpr size_t kMlpParams = 159010;  // the built-in MLP

Params Group(int n, int degree, size_t length, uint64_t round) {
  Params p;
  p.round = round;
  for (int i = 1; i <= n; ++i) p.members.push_back(static_cast<uint32_t>(i));
  p.degree = degree;
  p.threshold = std::max(2, degree / 2);
  p.graph_seed = round;
  p.length = length;
  return p;
}

// SecAgg+'s degree for n members: 2⌈log₂ n⌉, at most n − 1.
int DegreeFor(int n) { return std::min(n - 1, 2 * static_cast<int>(std::ceil(std::log2(n)))); }

void BM_MaskKeystream(benchmark::State& state) {
  std::vector<uint32_t> v(static_cast<size_t>(state.range(0)), 0);
  Secret32 seed{};
  for (auto _ : state) {
    (void)AddMask(v, seed, +1);
    benchmark::DoNotOptimize(v.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * v.size() * sizeof(uint32_t)));
}
BENCHMARK(BM_MaskKeystream)->Arg(kMlpParams)->Unit(benchmark::kMillisecond);

// One member of a group of k + 1 (everyone its neighbour): its calls timed, the others' not.
void BM_MemberRound(benchmark::State& state) {
  const int k = static_cast<int>(state.range(0));
  const size_t length = static_cast<size_t>(state.range(1));
  FixedPoint fp = *FixedPoint::Create(1.0, 1000);
  std::vector<float> delta(length);
  Rng rng(1);
  for (float& x : delta) x = static_cast<float>(rng.Normal() * 0.01);
  std::vector<uint32_t> encoded(length);
  uint64_t round = 0;
  size_t key_bytes = 0;
  for (auto _ : state) {
    state.PauseTiming();
    const Params p = Group(k + 1, k, length, ++round);
    auto server = *Server::Create(p, 0, 1000);
    std::map<uint32_t, std::unique_ptr<Member>> members;
    for (uint32_t m : p.members) members[m] = *Member::Create(p, m);
    for (uint32_t m : p.members) {
      if (m != 1) (void)server->Receive(*members[m]->Advertise(), 0);
    }
    state.ResumeTiming();
    const KeyAdvert advert = *members[1]->Advertise();
    state.PauseTiming();
    (void)server->Receive(advert, 0);
    state.ResumeTiming();
    const SealedShares shares = *members[1]->ShareKeys(server->AdvertsFor(1));
    state.PauseTiming();
    (void)server->Receive(shares, 0);
    for (uint32_t m : p.members) {
      if (m != 1) (void)server->Receive(*members[m]->ShareKeys(server->AdvertsFor(m)), 0);
    }
    Secret32 rounding{};
    rounding[0] = static_cast<uint8_t>(round);
    state.ResumeTiming();
    (void)fp.Encode(delta, rounding, encoded);
    const MaskedInput masked = *members[1]->MaskInput(encoded, server->SharesFor(1));
    state.PauseTiming();
    (void)server->Receive(masked, 0);
    for (uint32_t m : p.members) {
      if (m != 1) (void)server->Receive(*members[m]->MaskInput(encoded, server->SharesFor(m)), 0);
    }
    state.ResumeTiming();
    const RevealedShares revealed = *members[1]->Unmask(server->UnmaskRequestFor(1));
    benchmark::DoNotOptimize(revealed.self_seed.size());
    key_bytes =
        64 + shares.to.size() * shares.to.begin()->second.size() + revealed.self_seed.size() * (4 + kShamirShareBytes);
  }
  state.counters["upload_bytes"] = static_cast<double>(length * sizeof(uint32_t));
  state.counters["float32_bytes"] = static_cast<double>(length * sizeof(float));
  state.counters["key_bytes"] = static_cast<double>(key_bytes);
}
BENCHMARK(BM_MemberRound)
    ->Args({14, kMlpParams})
    ->Args({20, kMlpParams})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(20);

// The server's unmasking for n members with degree 2⌈log₂ n⌉, 10% dropped after sharing keys, on
// a pool of `threads`.
void BM_ServerUnmask(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const size_t length = static_cast<size_t>(state.range(1));
  ThreadPool pool(static_cast<size_t>(state.range(2)));
  std::vector<uint32_t> input(length, 7);
  uint64_t round = 100;
  for (auto _ : state) {
    state.PauseTiming();
    const Params p = Group(n, DegreeFor(n), length, ++round);
    auto server = *Server::Create(p, 0, 1000, &pool);
    std::map<uint32_t, std::unique_ptr<Member>> members;
    for (uint32_t m : p.members) members[m] = *Member::Create(p, m);
    for (uint32_t m : p.members) (void)server->Receive(*members[m]->Advertise(), 0);
    for (uint32_t m : p.members) (void)server->Receive(*members[m]->ShareKeys(server->AdvertsFor(m)), 0);
    for (uint32_t m : p.members) {
      if (m % 10 != 0) (void)server->Receive(*members[m]->MaskInput(input, server->SharesFor(m)), 0);
    }
    server->Tick(server->deadline_ms());  // the 10% never sent theirs
    std::vector<RevealedShares> revealed;
    for (uint32_t m : server->expected()) revealed.push_back(*members[m]->Unmask(server->UnmaskRequestFor(m)));
    for (size_t i = 0; i + 1 < revealed.size(); ++i) (void)server->Receive(revealed[i], 0);
    state.ResumeTiming();
    (void)server->Receive(revealed.back(), 0);  // the last answer closes the stage: unmasking
    if (server->stage() != Server::Stage::kDone) state.SkipWithError(server->abort_reason().c_str());
  }
  state.counters["degree"] = DegreeFor(n);
}
BENCHMARK(BM_ServerUnmask)
    ->Args({100, kMlpParams, 1})
    ->Args({1000, kMlpParams, 1})
    ->Args({1000, kMlpParams, 2})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

}  // namespace
}  // namespace plexus::secagg

BENCHMARK_MAIN();
