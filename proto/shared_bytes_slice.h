// SharedBytesSlice: a gRPC slice over bytes that a shared object owns, without copying them. The
// slice holds a reference to the owner until gRPC releases it, which may be after the write that
// sent it has returned (a failed or cancelled call can leave buffers queued in the transport), so
// the bytes stay valid however the call ends. For the raw transfers' model-sized payloads.
#pragma once
#include <grpcpp/support/slice.h>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace plexus {

// REQUIRES: `bytes` lies in memory that `owner` keeps valid and unchanged while it lives.
template <typename Owner>
grpc::Slice SharedBytesSlice(const std::shared_ptr<const Owner>& owner, std::string_view bytes) {
  auto* reference = new std::shared_ptr<const Owner>(owner);
  return grpc::Slice(
      const_cast<char*>(bytes.data()), bytes.size(),
      [](void* p) { delete static_cast<std::shared_ptr<const Owner>*>(p); }, reference);
}

// REQUIRES: offset + length <= owner->size().
inline grpc::Slice SharedBytesSlice(const std::shared_ptr<const std::string>& owner, size_t offset, size_t length) {
  return SharedBytesSlice(owner, std::string_view(*owner).substr(offset, length));
}

}  // namespace plexus
