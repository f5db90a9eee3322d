// KeepLargeAllocations: tells glibc's allocator to serve large blocks (model-sized buffers)
// from its heap and to keep freed memory, instead of mapping and unmapping them every round.
// On virtual machines the page faults of fresh mappings cost more than the aggregation itself.
// Call once at program start, before threads exist.
#pragma once

namespace plexus {

void KeepLargeAllocations();

}  // namespace plexus
