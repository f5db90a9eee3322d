// What logging an update's values into a file on tmpfs costs beside the copy every upload already
// makes (the decoder writing the values into the update's memory), and what a log that is the
// update's own memory would cost instead: the bound of the zero-copy design docs/benchmarks.md
// sketches for the tmpfs ingest target. One thread, 4 MB and 40 MB of float32 values, the
// destination reused across iterations as the server reuses its blocks and spare update files:
//   BM_HeapCopy           the values copied into a reused heap block (the decoder's copy; baseline)
//   BM_HeapCopyThenPwrite that, then written into a reused file after a 4 KiB header (today's log)
//   BM_MappedCopy         the values copied into a shared mapping of a reused file at offset 4 KiB,
//                         mapped once and kept (the decoder writing into the log file)
//   BM_MappedCopyEachTime the same with the file mapped (populated) and unmapped every time
// Bytes counted: the values' bytes. The files go to $PLEXUS_LOG_WRITE_DIR, else /dev/shm, else the
// temporary directory. bench/run_log_write_bench.sh prints the table.
#include <benchmark/benchmark.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

namespace {

constexpr size_t kHeader = 4096;  // the update file's padded safetensors header

std::string Directory() {
  if (const char* dir = std::getenv("PLEXUS_LOG_WRITE_DIR")) return dir;
  if (std::filesystem::is_directory("/dev/shm")) return "/dev/shm";
  return std::filesystem::temp_directory_path().string();
}

// A file of kHeader + bytes, written once, removed when done.
class LogFile {
 public:
  explicit LogFile(size_t bytes)
      : path_(Directory() + "/plexus_log_write_bench_" + std::to_string(::getpid()) + "_" + std::to_string(bytes)) {
    fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd_ < 0 || ::ftruncate(fd_, static_cast<off_t>(kHeader + bytes)) != 0) return;
    std::vector<char> zeros(kHeader + bytes, 0);
    ok_ = ::pwrite(fd_, zeros.data(), zeros.size(), 0) == static_cast<ssize_t>(zeros.size());
  }
  ~LogFile() {
    if (fd_ >= 0) ::close(fd_);
    ::unlink(path_.c_str());
  }
  bool ok() const { return ok_; }
  int fd() const { return fd_; }

 private:
  std::string path_;
  int fd_ = -1;
  bool ok_ = false;
};

size_t Bytes(const benchmark::State& state) { return static_cast<size_t>(state.range(0)) << 20; }

std::vector<float> Values(size_t bytes) {
  std::vector<float> v(bytes / sizeof(float));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.001f;
  return v;
}

void BM_HeapCopy(benchmark::State& state) {
  const size_t bytes = Bytes(state);
  const std::vector<float> src = Values(bytes);
  std::vector<float> dst(src.size(), 1.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_HeapCopyThenPwrite(benchmark::State& state) {
  const size_t bytes = Bytes(state);
  const std::vector<float> src = Values(bytes);
  std::vector<float> dst(src.size(), 1.0f);
  LogFile file(bytes);
  if (!file.ok()) return state.SkipWithError("cannot create the log file");
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
    if (::pwrite(file.fd(), dst.data(), bytes, kHeader) != static_cast<ssize_t>(bytes)) {
      return state.SkipWithError("pwrite failed");
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

// The values copied into a shared mapping of the file at offset 4 KiB: mapped once and kept, or
// mapped (populated) and unmapped around every copy.
void MappedCopy(benchmark::State& state, bool keep_mapping) {
  const size_t bytes = Bytes(state);
  const std::vector<float> src = Values(bytes);
  LogFile file(bytes);
  if (!file.ok()) return state.SkipWithError("cannot create the log file");
  auto map = [&] {
    return ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, file.fd(), kHeader);
  };
  void* kept = keep_mapping ? map() : nullptr;
  if (kept == MAP_FAILED) return state.SkipWithError("mmap failed");
  for (auto _ : state) {
    void* target = keep_mapping ? kept : map();
    if (target == MAP_FAILED) return state.SkipWithError("mmap failed");
    std::memcpy(target, src.data(), bytes);
    benchmark::ClobberMemory();
    if (!keep_mapping) ::munmap(target, bytes);
  }
  if (keep_mapping) ::munmap(kept, bytes);
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
}

void BM_MappedCopy(benchmark::State& state) { MappedCopy(state, /*keep_mapping=*/true); }
void BM_MappedCopyEachTime(benchmark::State& state) { MappedCopy(state, /*keep_mapping=*/false); }

#define PLEXUS_LOG_WRITE_CASE(fn) \
  BENCHMARK(fn)->Arg(4)->Arg(40)->UseRealTime()->Unit(benchmark::kMillisecond)->Repetitions(3)
PLEXUS_LOG_WRITE_CASE(BM_HeapCopy);
PLEXUS_LOG_WRITE_CASE(BM_HeapCopyThenPwrite);
PLEXUS_LOG_WRITE_CASE(BM_MappedCopy);
PLEXUS_LOG_WRITE_CASE(BM_MappedCopyEachTime);

}  // namespace

BENCHMARK_MAIN();
