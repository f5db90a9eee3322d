#include "compression/codec_wire.h"

#include <atomic>

#include "core/thread_pool.h"

namespace plexus::codec_wire {

char* SizedHeader(std::string* out, uint8_t id, uint64_t n, size_t total) {
  if (out->size() != total) {
    out->clear();
    out->resize(total);
  }
  char* at = out->data();
  std::memcpy(at, kMagic, 4);
  at[4] = static_cast<char>(id);
  std::memcpy(at + 5, &n, 8);
  return at + kHeaderBytes;
}

std::string& Header(std::string* out, uint8_t id, uint64_t n) {
  out->assign(kMagic, 4);
  out->push_back(static_cast<char>(id));
  Put<uint64_t>(*out, n);
  return *out;
}

Status CodecError(const std::string& what) { return InvalidArgumentError("compressed update: " + what); }

Status CheckHeader(std::string_view bytes, uint8_t id, size_t n) {
  if (bytes.size() < kHeaderBytes || std::memcmp(bytes.data(), kMagic, 4) != 0) {
    return CodecError("not a plexus compressed payload");
  }
  if (static_cast<uint8_t>(bytes[4]) != id) {
    return CodecError("encoded with codec " + std::to_string(static_cast<uint8_t>(bytes[4])) + ", expected " +
                      std::to_string(id));
  }
  if (Get<uint64_t>(bytes, 5) != n) {
    return CodecError("holds " + std::to_string(Get<uint64_t>(bytes, 5)) + " values, the model has " +
                      std::to_string(n));
  }
  return Status::Ok();
}

Status CheckLength(std::string_view bytes, size_t payload) {
  if (bytes.size() != kHeaderBytes + payload) {
    return CodecError(std::to_string(bytes.size()) + " bytes where " + std::to_string(kHeaderBytes + payload) +
                      " were expected");
  }
  return Status::Ok();
}

void ForRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<void(size_t, size_t)>& fn) {
  if (pool != nullptr && pool->size() > 1 && n >= 2 * min_range) {
    pool->ParallelFor(n, fn, min_range);
  } else if (n > 0) {
    fn(0, n);
  }
}

Result<ModelState> Finished(ModelState out, bool all_finite) {
  if (all_finite) {
    out.MarkCheckedFinite();
    return out;
  }
  PLEXUS_RETURN_IF_ERROR(out.CheckFinite().WithContext("compressed update"));
  return out;
}
Result<ModelState> Finished(ModelState out) { return Finished(std::move(out), false); }

bool AllFiniteOverRanges(ThreadPool* pool, size_t n, size_t min_range, const std::function<bool(size_t, size_t)>& fn) {
  std::atomic<bool> bad{false};
  ForRanges(pool, n, min_range, [&](size_t begin, size_t end) {
    if (fn(begin, end)) bad.store(true, std::memory_order_relaxed);
  });
  return !bad.load();
}

}  // namespace plexus::codec_wire
