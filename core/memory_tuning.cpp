#include "core/memory_tuning.h"

#include <malloc.h>

namespace plexus {

void KeepLargeAllocations() {
#ifdef M_MMAP_THRESHOLD
  mallopt(M_MMAP_THRESHOLD, 1 << 30);  // blocks up to 1 GiB come from the heap
  mallopt(M_TRIM_THRESHOLD, -1);       // and freed heap memory is kept for reuse
#endif
}

void ServeFromOneArena() {
#ifdef M_ARENA_MAX
  mallopt(M_ARENA_MAX, 1);
#endif
}

}  // namespace plexus
