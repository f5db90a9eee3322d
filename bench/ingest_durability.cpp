// ingest_durability: what making every acknowledged asynchronous update durable costs the
// server's ingest. Drives the real AsyncEngine (FedBuff, a buffer of `--buffer` updates, each
// version hashed and committed by a thread of its own outside the engine's lock, as `plexus
// server` does) over a real SqliteStore in `--dir`, submitting `--updates` updates of a model of
// `--params` float32 parameters from `--buffer` clients, in these variants:
//   logged:   as the server runs: each update decoded where the store lends (on tmpfs, one of its
//             update files: Store::UpdateMemory), written to its file (there, only the header),
//             synced, then its row, before Submit returns (Store::LogUpdate), and the entries
//             removed with the commit that merges them;
//   unlogged: the same store with LogUpdate skipped (a store wrapper) and updates in the heap: the
//             engine as it was before acknowledgements became durable, the baseline;
//   copied:   logged, with the update in the heap and its values copied into its file (the store
//             lends no files): every update before the store lent them, and still on a disk.
// Each update is a fresh copy of one prepared delta, as the server has a freshly decoded update
// per upload. No gRPC, no decoding: the cost isolated is the log's. With `--codec SPEC` (a codec
// with a coded form: int8, top-k, fp16, bf16) a fourth variant logs the updates as the server now keeps such
// uploads into FedAvg: each a fresh copy of the encoded bytes, read (checked) into a coded delta,
// logged as those bytes and folded from them. Prints one markdown row per variant (update bytes
// counted as float32 model bytes throughout) and the ratio to unlogged. The first `--warmup`
// updates (five versions' by default) are not timed: by then the memory and update files a
// long-running server reuses are in use. Each variant runs twice, the variants in turn, and its
// faster run is shown.
// Updates are submitted as the server's upload handlers submit them: `--threads` threads (one
// per client by default), each Admit and Complete under one lock and the durable write (Persist)
// outside it, so that updates that finish together share the store's group commit, and held
// back while kMaxPendingCommits versions wait for the commit thread.
// usage: ingest_durability --dir DIR [--params N] [--updates N] [--buffer K] [--threads T] [--codec SPEC]
//        [--warmup N]
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "compression/codec.h"
#include "core/clock.h"
#include "core/large_block_source.h"
#include "core/memory_tuning.h"
#include "server/coordinator/async_engine.h"
#include "server/store/sqlite_store.h"
#include "server/store/store_wrapper.h"

namespace plexus {
namespace {

// The baseline: acknowledgements that are not durable (nothing logged, so nothing to forget).
class UnloggedStore final : public StoreWrapper {
 public:
  explicit UnloggedStore(Store* target) : StoreWrapper(target) {}
  Status LogUpdate(uint64_t, const Update&) override { return Status::Ok(); }
  // Updates in the heap, as the engine had them before acknowledgements became durable.
  std::shared_ptr<LargeBlockSource> UpdateMemory() override { return nullptr; }
  Status CommitRound(const RoundRecord& r, const ModelState& m, std::string_view state) override {
    RoundRecord without_log = r;
    without_log.logged_done.clear();
    return StoreWrapper::CommitRound(without_log, m, state);
  }
};

struct Args {
  std::string dir;
  int64_t params = 1000000;
  int64_t updates = 300;
  int64_t buffer = 10;
  int64_t threads = 0;  // 0: one per client (--buffer)
  std::string codec;    // empty: float32 updates only
  int64_t warmup = -1;  // updates not timed; -1: five versions' (5 * --buffer)
};

[[noreturn]] void Usage(const char* why) {
  std::fprintf(stderr,
               "ingest_durability: %s\nusage: ingest_durability --dir DIR [--params N] [--updates N] [--buffer K] "
               "[--threads T] [--codec SPEC] [--warmup N]\n",
               why);
  std::exit(2);
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "ingest_durability: async ingest (AsyncEngine + SqliteStore) with and without the update log\n"
          "usage: ingest_durability --dir DIR [--params N] [--updates N] [--buffer K] [--threads T] "
          "[--codec SPEC] [--warmup N]\n"
          "  --warmup N  updates submitted before the clock starts (default: five versions', 5 * --buffer): a\n"
          "              long-running server's memory and update files are all in use already\n");
      std::exit(0);
    }
    if (i + 1 >= argc) Usage(("missing value for " + flag).c_str());
    const char* v = argv[++i];
    if (flag == "--dir") {
      a.dir = v;
    } else if (flag == "--params") {
      a.params = std::atoll(v);
    } else if (flag == "--updates") {
      a.updates = std::atoll(v);
    } else if (flag == "--buffer") {
      a.buffer = std::atoll(v);
    } else if (flag == "--warmup") {
      a.warmup = std::atoll(v);
    } else if (flag == "--threads") {
      a.threads = std::atoll(v);
    } else if (flag == "--codec") {
      a.codec = v;
    } else {
      Usage(("unknown flag " + flag).c_str());
    }
  }
  if (a.dir.empty()) Usage("--dir is required");
  if (a.params <= 0 || a.buffer <= 0 || a.updates < a.buffer) Usage("need --params > 0 and --updates >= --buffer > 0");
  if (a.threads < 0 || a.threads > a.buffer) Usage("need 0 <= --threads <= --buffer");
  if (a.threads == 0) a.threads = a.buffer;
  if (a.warmup < 0) a.warmup = 5 * a.buffer;
  if (a.warmup >= a.updates / a.buffer * a.buffer) Usage("need --warmup below the updates submitted");
  return a;
}

// Seconds to submit every update after the first `a.warmup` through a fresh engine on `store` (from
// the moment the first timed update is taken); with `codec`, every update arrives coded.
Result<double> Ingest(const Args& a, Store* store, const Codec* codec) {
  ModelState initial = *ModelState::Create({{"w", {a.params}}});
  AsyncOptions o;
  o.buffer_size = a.buffer;
  o.rounds = a.updates / a.buffer;
  o.staleness = "constant";
  o.max_staleness = 1 << 30;
  o.commit_outside = true;  // as `plexus server` runs FedBuff: versions commit outside its lock
  ManualClock clock;
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<AsyncEngine> engine,
                          AsyncEngine::Open(o, initial, store, &clock, nullptr, nullptr));
  for (int64_t c = 0; c < a.buffer; ++c) {
    PLEXUS_RETURN_IF_ERROR(engine->Join({"c" + std::to_string(c), 10, "bench"}).status());
  }
  ModelState delta = ModelState::ZerosLike(initial);
  for (size_t i = 0; i < delta.num_params(); ++i) delta.data()[i] = 1e-3f * static_cast<float>(i % 11);
  // Each update below is a copy of this one, standing for the server's decoded upload: its
  // decoder checks every value finite as it writes it, so the engine does not check it again
  // (the copies carry the mark).
  delta.MarkCheckedFinite();
  const std::string encoded = codec ? codec->Encode(delta, nullptr, 1) : std::string();
  const int64_t total = o.rounds * a.buffer;
  std::mutex engine_mu;                         // the server's lock around its engine
  std::condition_variable version_queued;       // a version waits for its commit; with engine_mu
  std::condition_variable commit_finished;      // a commit was handed back; with engine_mu
  int64_t taken = 0;                            // updates handed to a thread so far; guarded by engine_mu
  bool submitted = false;                       // every submitter is done; guarded by engine_mu
  std::chrono::steady_clock::time_point start;  // the first timed update taken; guarded by engine_mu
  Status failed;                                // the first error; guarded by engine_mu
  // Thread t submits for clients t, t + threads, ...: poll, wait while too many commits are
  // pending, Admit under the lock, Persist without it, Complete under it again.
  auto submitter = [&](int64_t t) {
    int64_t turn = 0;
    while (true) {
      const std::string id =
          "c" + std::to_string(t + (turn++ % ((a.buffer - t + a.threads - 1) / a.threads)) * a.threads);
      Update u;
      {
        std::lock_guard<std::mutex> lock(engine_mu);
        if (!failed.ok() || taken >= total) return;
        if (taken++ == a.warmup) start = std::chrono::steady_clock::now();
        Result<PollAnswer> answer = engine->Poll(id);
        if (!answer.ok() || answer->kind != PollAnswer::Kind::kTask) {
          failed = answer.ok() ? InternalError("client " + id + " got no task") : answer.status();
          return;
        }
        u.task_id = answer->task.task_id;
        u.base_version = answer->task.model_version;
      }
      u.client_id = id;
      u.num_examples = 10;
      u.local_steps = 1;
      u.metrics["train_loss"] = 0.5;
      if (codec) {  // a fresh copy of the received bytes, checked and kept coded as the door does
        Result<std::shared_ptr<const CodedDelta>> read = codec->Read(encoded, delta);
        if (!read.ok()) {
          std::lock_guard<std::mutex> lock(engine_mu);
          failed = read.status();
          return;
        }
        u.coded = std::move(read).value();
      } else {
        // A fresh update, checked finite, as a decoded upload is, and where the server decodes
        // one: the store's update memory (on tmpfs its update files, so that the log copies nothing).
        const ScopedLargeBlockSource decode_into(store->UpdateMemory());
        u.delta = delta;
      }
      std::unique_lock<std::mutex> lock(engine_mu);
      // As the server's upload handlers: held back while too many versions wait for their commit.
      commit_finished.wait(lock, [&] { return engine->commits_pending() < kMaxPendingCommits || !failed.ok(); });
      Result<AdmittedUpdate> admitted = engine->Admit(std::move(u));
      Status s = admitted.status();
      if (admitted.ok()) {
        lock.unlock();
        const Status persisted = engine->Persist(*admitted);
        lock.lock();
        s = engine->Complete(std::move(admitted).value(), persisted);
        version_queued.notify_one();
      }
      if (!s.ok() && failed.ok()) failed = s;
    }
  };
  // The server's commit thread (FederationServiceImpl::RunCommits): hashes and commits each
  // published version outside the lock, oldest first, while updates fold into the next buffer.
  auto committer = [&] {
    std::unique_lock<std::mutex> lock(engine_mu);
    while (true) {
      std::optional<PendingCommit> commit = engine->TakeCommit();
      if (!commit) {
        if (submitted) return;
        version_queued.wait(lock);
        continue;
      }
      lock.unlock();
      Status committed = commit->Run(store);
      lock.lock();
      Status s = engine->FinishCommit(std::move(*commit), std::move(committed));
      if (!s.ok() && failed.ok()) failed = s;
      commit_finished.notify_all();
    }
  };
  std::thread commits(committer);
  std::vector<std::thread> threads;
  for (int64_t t = 0; t < a.threads; ++t) threads.emplace_back(submitter, t);
  for (std::thread& t : threads) t.join();
  {
    std::lock_guard<std::mutex> lock(engine_mu);
    submitted = true;
  }
  version_queued.notify_one();
  commits.join();
  PLEXUS_RETURN_IF_ERROR(failed);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!engine->finished()) return InternalError("the federation did not finish");
  return seconds;
}

int Main(int argc, char** argv) {
  const Args a = Parse(argc, argv);
  KeepLargeAllocations();  // as the server does
  ServeFromOneArena();
  std::filesystem::create_directories(a.dir);
  const double update_bytes = 4.0 * static_cast<double>(a.params);
  const int64_t updates = a.updates / a.buffer * a.buffer;
  std::unique_ptr<Codec> codec;
  if (!a.codec.empty()) {
    Result<std::unique_ptr<Codec>> made = MakeCodec(a.codec);
    if (!made.ok() || !(*made)->has_coded_form()) {
      std::fprintf(stderr, "ingest_durability: --codec %s: %s\n", a.codec.c_str(),
                   made.ok() ? "has no coded form (int8 and topk have)" : made.status().ToString().c_str());
      return 1;
    }
    codec = std::move(made).value();
  }
  // 0: logged as the server logs; 1: unlogged; 2: logged with the values copied into their file
  // (the update decoded into the heap: how every update was logged before the store lent its
  // files, and still is on a disk); 3: logged coded (--codec).
  const int variants = codec ? 4 : 3;
  double seconds[4] = {0, 0, 0, 0};   // each variant's faster run
  int64_t commits[4] = {0, 0, 0, 0};  // group commits of update rows in that run
  const std::string coded_name = "logged, " + a.codec + " kept coded";
  const char* names[4] = {"logged (durable acknowledgements)", "unlogged (baseline)",
                          "logged, values copied into their file", coded_name.c_str()};
  const int64_t timed = updates - a.warmup;
  // Every variant runs twice, in turn, and keeps its faster run: the process's first touch of
  // fresh memory (on a virtual machine, a trip to the hypervisor per page the host has not backed
  // yet) would otherwise fall on whichever variant runs first; the later runs reuse blocks the
  // process already holds, as a long-running server does.
  for (int pass = 0; pass < 2; ++pass) {
    for (int variant = 0; variant < variants; ++variant) {
      const std::string path = a.dir + "/ingest-" + std::to_string(variant) + ".db";
      std::filesystem::remove_all(path);
      std::filesystem::remove_all(path + ".checkpoints");
      std::filesystem::remove_all(path + ".updates");
      Result<std::unique_ptr<SqliteStore>> sqlite = SqliteStore::Open(path);
      if (!sqlite.ok()) {
        std::fprintf(stderr, "ingest_durability: %s\n", sqlite.status().ToString().c_str());
        return 1;
      }
      (*sqlite)->SetCheckpointRetention(2, 0);  // as a long-running server keeps a few
      if (variant == 2) (*sqlite)->SetUpdateFileMapping(SqliteStore::UpdateFileMapping::kNever);
      std::atomic<int64_t> run_commits{0};
      (*sqlite)->SetUpdateRowCommitHook([&run_commits](size_t) { ++run_commits; });
      UnloggedStore unlogged(sqlite->get());
      Result<double> s = Ingest(a, variant == 1 ? &unlogged : static_cast<Store*>(sqlite->get()),
                                variant == 3 ? codec.get() : nullptr);
      if (!s.ok()) {
        std::fprintf(stderr, "ingest_durability: %s: %s\n", names[variant], s.status().ToString().c_str());
        return 1;
      }
      if (pass == 0 || *s < seconds[variant]) {
        seconds[variant] = *s;
        commits[variant] = run_commits.load();
      }
    }
  }
  std::printf(
      "| variant | threads | updates | update size | updates/s | update bytes/s | vs unlogged | updates per commit "
      "|\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int variant = 0; variant < variants; ++variant) {
    const double rate = static_cast<double>(timed) / seconds[variant];
    const std::string per_commit =
        commits[variant] > 0
            ? std::to_string(static_cast<double>(updates) / static_cast<double>(commits[variant])).substr(0, 4)
            : std::string("-");
    std::printf("| %s | %lld | %lld | %.1f MB | %.0f | %.2f GB/s | %.2f | %s |\n", names[variant],
                static_cast<long long>(a.threads), static_cast<long long>(timed), update_bytes / 1e6, rate,
                rate * update_bytes / 1e9, seconds[1] / seconds[variant], per_commit.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace plexus

int main(int argc, char** argv) { return plexus::Main(argc, argv); }
