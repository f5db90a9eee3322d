// Encode and decode speed of every codec (compression/codec.h) on a 10M-value delta (40 MB of
// float32), on one thread beside a one-thread triad over the same number of values, and for the
// codecs that split across a pool (f32, fp16, bf16, int8) on two threads beside a two-thread
// triad, in the same run. Bytes counted: the float32 bytes of the delta (read by Encode, written
// by Decode), so that "GB/s of model" compares across codecs; bench/run_codec_bench.sh prints the
// table.
// The server's side of an upload into FedAvg on two threads: a float32 delta folded into the
// running sum, a coded one decoded then folded (what the server did before it kept codes), and a
// coded one read (checked) and folded straight from its codes, per codec with a coded form.
#include <benchmark/benchmark.h>

#include <span>
#include <string_view>
#include <vector>

#include "aggregators/registry.h"
#include "compression/codec.h"
#include "core/crc32c.h"
#include "core/rng.h"
#include "core/thread_pool.h"

namespace plexus {
namespace {

constexpr size_t kValues = 10'000'000;

const ModelState& Delta() {
  static const ModelState d = [] {
    ModelState m = *ModelState::Create({{"w", {static_cast<int64_t>(kValues)}}});
    Rng rng(1);
    for (float& x : m.data()) x = static_cast<float>(rng.Normal() * 0.01);
    return m;
  }();
  return d;
}

void BM_Triad(benchmark::State& state) {
  std::vector<float> a(kValues, 1.0f), b(kValues, 2.0f), c(kValues, 3.0f);
  for (auto _ : state) {
    for (size_t j = 0; j < kValues; ++j) a[j] = b[j] + 0.5f * c[j];
    benchmark::DoNotOptimize(a.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * kValues * sizeof(float)));
}
BENCHMARK(BM_Triad)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3);

ThreadPool& TwoThreads() {
  static ThreadPool pool(2);
  return pool;
}

void BM_Triad2(benchmark::State& state) {
  std::vector<float> a(kValues, 1.0f), b(kValues, 2.0f), c(kValues, 3.0f);
  for (auto _ : state) {
    TwoThreads().ParallelFor(kValues, [&](size_t begin, size_t end) {
      for (size_t j = begin; j < end; ++j) a[j] = b[j] + 0.5f * c[j];
    });
    benchmark::DoNotOptimize(a.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * 3 * kValues * sizeof(float)));
}
BENCHMARK(BM_Triad2)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3);

void BM_Encode(benchmark::State& state, const char* spec, ThreadPool* pool) {
  auto codec = *MakeCodec(spec, pool);
  const ModelState& d = Delta();
  ModelState residual = ModelState::ZerosLike(d);
  uint64_t seed = 0;
  std::string bytes;  // reused, as a sender would
  for (auto _ : state) {
    codec->EncodeTo(d, &residual, ++seed, &bytes);
    benchmark::DoNotOptimize(bytes.data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * d.num_bytes()));
}

void BM_Decode(benchmark::State& state, const char* spec, ThreadPool* pool) {
  auto codec = *MakeCodec(spec, pool);
  const ModelState& d = Delta();
  const std::string bytes = codec->Encode(d, nullptr, 1);
  for (auto _ : state) {
    Result<ModelState> out = codec->Decode(bytes, d);
    benchmark::DoNotOptimize(out->data().data());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * d.num_bytes()));
}

// FedAvg over a model of the delta's size; the first fold stores, the rest add (as a round's do).
std::unique_ptr<Aggregator> BegunFedAvg() {
  auto fedavg = *MakeAggregator("fedavg", &TwoThreads());
  (void)fedavg->Begin(ModelState::ZerosLike(Delta()));
  return fedavg;
}

Update Weighted(ModelState delta) {
  Update u;
  u.client_id.assign(1, 'c');  // (not = "c": GCC 12 warns of a false overlap, -Wrestrict)
  u.num_examples = 10;
  u.delta = std::move(delta);
  return u;
}

// The finiteness scan every decoder runs over values as they arrive (AllFinite): over a 256 KB
// piece, in cache as a received chunk is, and over the whole delta.
void BM_CheckFinite(benchmark::State& state) {
  const std::span<const float> values = Delta().data().subspan(0, static_cast<size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(AllFinite(values));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * values.size_bytes()));
}
BENCHMARK(BM_CheckFinite)->Arg(65536)->Arg(kValues)->UseRealTime()->Unit(benchmark::kMicrosecond)->Repetitions(3);

// The CRC-32C that guards each frame of a plaintext peer link and names a model's content in its
// tasks (core/crc32c.h): over a 256 KB chunk, in cache as a received chunk is, and over the whole
// delta, by each way this CPU runs (an error row for a way it does not).
void BM_Crc32c(benchmark::State& state, Crc32cPath path) {
  if (!Crc32cRunsOnThisCpu(path)) return state.SkipWithError("this CPU does not run this path");
  const std::span<const float> values = Delta().data().subspan(0, static_cast<size_t>(state.range(0)));
  const std::string_view bytes(reinterpret_cast<const char*>(values.data()), values.size_bytes());
  for (auto _ : state) benchmark::DoNotOptimize(ExtendCrc32c(path, 0, bytes));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes.size()));
}
BENCHMARK_CAPTURE(BM_Crc32c, instruction, Crc32cPath::kInstruction)
    ->Arg(65536)
    ->Arg(kValues)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3);
BENCHMARK_CAPTURE(BM_Crc32c, folding, Crc32cPath::kFolding)
    ->Arg(65536)
    ->Arg(kValues)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond)
    ->Repetitions(3);

void BM_FoldFloat32(benchmark::State& state) {
  auto fedavg = BegunFedAvg();
  const Update u = Weighted(Delta());
  for (auto _ : state) benchmark::DoNotOptimize(fedavg->Fold(u).ok());
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Delta().num_bytes()));
}
BENCHMARK(BM_FoldFloat32)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3);

void BM_DecodeThenFold(benchmark::State& state, const char* spec) {
  auto codec = *MakeCodec(spec, &TwoThreads());
  auto fedavg = BegunFedAvg();
  const std::string bytes = codec->Encode(Delta(), nullptr, 1);
  for (auto _ : state) {
    const Update u = Weighted(*codec->Decode(bytes, Delta()));
    benchmark::DoNotOptimize(fedavg->Fold(u).ok());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Delta().num_bytes()));
}

void BM_FoldFromCodes(benchmark::State& state, const char* spec) {
  auto codec = *MakeCodec(spec, &TwoThreads());
  auto fedavg = BegunFedAvg();
  const std::string bytes = codec->Encode(Delta(), nullptr, 1);
  for (auto _ : state) {
    state.PauseTiming();
    std::string received = bytes;  // the door hands its received bytes over; not timed
    state.ResumeTiming();
    Update u = Weighted(ModelState());
    u.coded = *codec->Read(std::move(received), Delta());
    benchmark::DoNotOptimize(fedavg->Fold(u).ok());
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * Delta().num_bytes()));
}

#define PLEXUS_FOLD_BENCH(name, spec)                                                                             \
  BENCHMARK_CAPTURE(BM_DecodeThenFold, name, spec)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3); \
  BENCHMARK_CAPTURE(BM_FoldFromCodes, name, spec)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3);
PLEXUS_FOLD_BENCH(int8, "int8")
PLEXUS_FOLD_BENCH(fp16, "fp16")
PLEXUS_FOLD_BENCH(topk_1pct, "topk:ratio=0.01")

#define PLEXUS_CODEC_BENCH(name, spec)                                                                             \
  BENCHMARK_CAPTURE(BM_Encode, name, spec, nullptr)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3); \
  BENCHMARK_CAPTURE(BM_Decode, name, spec, nullptr)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3);
#define PLEXUS_CODEC_BENCH2(name, spec)                              \
  BENCHMARK_CAPTURE(BM_Encode, name##_2threads, spec, &TwoThreads()) \
      ->UseRealTime()                                                \
      ->Unit(benchmark::kMillisecond)                                \
      ->Repetitions(3);                                              \
  BENCHMARK_CAPTURE(BM_Decode, name##_2threads, spec, &TwoThreads()) \
      ->UseRealTime()                                                \
      ->Unit(benchmark::kMillisecond)                                \
      ->Repetitions(3);
PLEXUS_CODEC_BENCH(f32, "f32")
PLEXUS_CODEC_BENCH(fp16, "fp16")
PLEXUS_CODEC_BENCH(bf16, "bf16")
PLEXUS_CODEC_BENCH(int8, "int8")
PLEXUS_CODEC_BENCH(qsgd, "qsgd")
PLEXUS_CODEC_BENCH(terngrad, "terngrad")
PLEXUS_CODEC_BENCH(topk_1pct, "topk:ratio=0.01")
PLEXUS_CODEC_BENCH(dct, "dct")
PLEXUS_CODEC_BENCH2(f32, "f32")
PLEXUS_CODEC_BENCH2(fp16, "fp16")
PLEXUS_CODEC_BENCH2(bf16, "bf16")
PLEXUS_CODEC_BENCH2(int8, "int8")

}  // namespace
}  // namespace plexus

BENCHMARK_MAIN();
