// What every codec's bytes share, and the loops' building blocks: the header ("PXC1", the
// codec's id byte, the number of values as u64), its checks, and the helpers that spread a
// model-sized loop over a thread pool. Internal to compression/ (codec.h is the interface): one
// codec per file includes it. Stateless; thread-safe.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class ThreadPool;

namespace codec_wire {

static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

inline constexpr char kMagic[4] = {'P', 'X', 'C', '1'};
inline constexpr size_t kHeaderBytes = 4 + 1 + 8;

template <typename T>
inline void Put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof v);
}
template <typename T>
inline T Get(std::string_view bytes, size_t at) {
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof v);
  return v;
}

// A string as a uint32 length and its bytes.
inline void PutString(std::string& out, std::string_view s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out.append(s);
}

// Reads a payload's fields in order from `bytes` at `at`, moving past what it read; each call is
// false, reading nothing, when the bytes end first (or a string is longer than `longest`).
struct Reader {
  std::string_view bytes;
  size_t at = 0;

  size_t left() const { return bytes.size() - at; }
  template <typename T>
  bool Get(T* v) {
    if (left() < sizeof(T)) return false;
    std::memcpy(v, bytes.data() + at, sizeof(T));
    at += sizeof(T);
    return true;
  }
  bool Take(size_t n, std::string_view* out) {
    if (left() < n) return false;
    *out = bytes.substr(at, n);
    at += n;
    return true;
  }
  bool String(std::string* out, uint32_t longest) {
    const size_t start = at;
    uint32_t n = 0;
    std::string_view s;
    if (!Get(&n) || n > longest || !Take(n, &s)) {
      at = start;
      return false;
    }
    out->assign(s);
    return true;
  }
};

// Makes `out` `total` bytes long and writes the header at its start; returns where the payload
// starts. A buffer that already has that size (a sender encoding every task) is not written
// before the codec fills it: resizing from empty would first zero it, one more serial pass.
char* SizedHeader(std::string* out, uint8_t id, uint64_t n, size_t total);

// Starts `out` (replacing what it held, keeping its capacity) with the header.
std::string& Header(std::string* out, uint8_t id, uint64_t n);

// InvalidArgument, "compressed update: " + what.
Status CodecError(const std::string& what);

// Checks the header against the codec and the layout; the payload follows it.
Status CheckHeader(std::string_view bytes, uint8_t id, size_t n);
// The bytes are the header and `payload` bytes, no more or less.
Status CheckLength(std::string_view bytes, size_t payload);

// A scale or norm a decoder may multiply by.
inline bool FiniteScale(float s) { return std::isfinite(s) && s >= 0.0f; }

// Whether a float's bits are an infinity or a NaN (exponent all ones).
inline uint32_t NotFinite(float f) { return (std::bit_cast<uint32_t>(f) & 0x7f800000u) == 0x7f800000u; }

// The loops that touch every value, as functions of their own so that on x86-64 each also comes
// in an AVX2 build, picked at load time (GCC's target_clones): the baseline x86-64 (SSE2) does 4
// values per instruction, AVX2 8. Elsewhere (aarch64, riscv64) the compiler's own vectors only.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PLEXUS_VALUE_LOOP __attribute__((target_clones("avx2", "default")))
#else
#define PLEXUS_VALUE_LOOP
#endif

// Runs fn(begin, end) over [0, n) on the pool's threads in ranges of at least `min_range` (one
// range, on this thread, without a pool or for small n).
void ForRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<void(size_t, size_t)>& fn);
inline constexpr size_t kMinParallelValues = size_t{1} << 16;

// The decoded delta, checked finite: `all_finite` says the decoding loops saw only finite
// values (CheckFinite then runs only to name the first bad one).
Result<ModelState> Finished(ModelState out, bool all_finite);
Result<ModelState> Finished(ModelState out);

// Runs fn(begin, end) -> "saw a non-finite value" over ranges as ForRanges does; true when no
// range saw one.
bool AllFiniteOverRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<bool(size_t, size_t)>& fn);

}  // namespace codec_wire
}  // namespace plexus
