// SharedBytesSlice: a gRPC slice over part of a shared string, without copying the bytes. The
// slice holds a reference to the string until gRPC releases it, which may be after the write that
// sent it has returned (a failed or cancelled call can leave buffers queued in the transport), so
// the bytes stay valid however the call ends. For the raw transfers' model-sized payloads.
#pragma once
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <memory>
#include <string>

namespace plexus {

// REQUIRES: offset + length <= owner->size().
inline grpc::Slice SharedBytesSlice(const std::shared_ptr<const std::string>& owner, size_t offset, size_t length) {
  auto* reference = new std::shared_ptr<const std::string>(owner);
  return grpc::Slice(
      const_cast<char*>(owner->data() + offset), length,
      [](void* p) { delete static_cast<std::shared_ptr<const std::string>*>(p); }, reference);
}

}  // namespace plexus
