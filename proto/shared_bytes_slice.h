// SharedBytesSlice: a gRPC slice over bytes that a shared object owns, without copying them. The
// slice holds a reference to the owner until gRPC releases it, which may be after the write that
// sent it has returned (a failed or cancelled call can leave buffers queued in the transport), so
// the bytes stay valid however the call ends. For the raw transfers' model-sized payloads.
#pragma once
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <memory>
#include <string_view>

#include "core/payload.h"

namespace plexus {

// REQUIRES: `bytes` lies in memory that `owner` keeps valid and unchanged while it lives.
template <typename Owner>
grpc::Slice SharedBytesSlice(const std::shared_ptr<const Owner>& owner, std::string_view bytes) {
  auto* reference = new std::shared_ptr<const Owner>(owner);
  return grpc::Slice(
      const_cast<char*>(bytes.data()), bytes.size(),
      [](void* p) { delete static_cast<std::shared_ptr<const Owner>*>(p); }, reference);
}

// Bytes [offset, offset + length) of `payload` as slices that hold it: the part in its head, then
// the part in its body, whichever are not empty, written to out[0] and on. Returns how many (0, 1
// or 2). REQUIRES: offset + length <= payload->size().
inline size_t PayloadSlices(const std::shared_ptr<const Payload>& payload, size_t offset, size_t length,
                            grpc::Slice out[2]) {
  size_t count = 0;
  const size_t head = payload->head().size();
  if (length > 0 && offset < head) out[count++] = SharedBytesSlice(payload, payload->head().substr(offset, length));
  if (offset + length > head) {
    const size_t from = offset > head ? offset - head : 0;
    out[count++] = SharedBytesSlice(payload, payload->body().substr(from, offset + length - head - from));
  }
  return count;
}

}  // namespace plexus
