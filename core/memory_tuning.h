// KeepLargeAllocations: tells glibc's allocator to serve large blocks (model-sized buffers)
// from its heap and to keep freed memory, instead of mapping and unmapping them every round.
// On virtual machines the page faults of fresh mappings cost more than the aggregation itself.
// Call once at program start, before threads exist.
#pragma once

namespace plexus {

void KeepLargeAllocations();

// ServeFromOneArena: all threads allocate from glibc's main heap. glibc otherwise gives busy
// threads heaps of their own and unmaps each such heap once it empties, so a server whose gRPC
// threads take turns receiving megabytes keeps getting fresh, zeroed pages from the kernel (half
// of its CPU per update, measured on the ingest benchmark); the main heap keeps what it frees
// (KeepLargeAllocations). For processes whose threads mostly move large buffers (the server, its
// load generator); training threads, which allocate small tensors all the time, keep their
// arenas. Call before threads exist.
void ServeFromOneArena();

}  // namespace plexus
