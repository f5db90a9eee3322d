#include "core/large_blocks.h"

#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/model_state.h"

namespace plexus {
namespace {

TEST(LargeBlocksTest, AFreedBlockIsHandedOutAgainForTheSameSize) {
  const size_t bytes = kLargeBlockBytes + 4096 * 3;  // a size no other test uses
  void* first = AllocateLargeBlock(bytes);
  std::memset(first, 7, bytes);  // writable end to end
  FreeLargeBlock(first, bytes);
  void* other_size = AllocateLargeBlock(bytes + 4096);
  void* again = AllocateLargeBlock(bytes);
  EXPECT_EQ(again, first);
  EXPECT_NE(other_size, first);
  FreeLargeBlock(other_size, bytes + 4096);
  FreeLargeBlock(again, bytes);
}

TEST(LargeBlocksTest, TheCacheKeepsABoundedNumberOfBlocks) {
  const size_t bytes = kLargeBlockBytes + 4096 * 5;
  std::vector<void*> blocks;
  for (size_t i = 0; i < kMaxCachedBlocks + 4; ++i) blocks.push_back(AllocateLargeBlock(bytes));
  for (void* p : blocks) FreeLargeBlock(p, bytes);
  EXPECT_EQ(CachedLargeBlocks(), kMaxCachedBlocks);
  EXPECT_LE(CachedLargeBlockBytes(), kMaxCachedBytes);
}

TEST(LargeBlocksTest, ModelsOfAMillionParametersReuseTheirBuffers) {
  Result<ModelState> a = ModelState::Create({{"w", {1000, 1000}}});
  ASSERT_TRUE(a.ok());
  for (float x : a->data()) ASSERT_EQ(x, 0.0f);  // Create zeroes even a reused block
  a->data()[5] = 3.0f;
  const float* where = a->data().data();
  ModelState copy = *a;
  EXPECT_EQ(copy.data()[5], 3.0f);
  *a = ModelState();  // frees the first buffer
  Result<ModelState> b = ModelState::Create({{"w", {1000, 1000}}});
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->data().data(), where);
  EXPECT_EQ(b->data()[5], 0.0f);
}

#if defined(__linux__)
// Whether one mapping of /proc/self/maps holds [begin, end).
bool Mapped(uintptr_t begin, uintptr_t end) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    uintptr_t from = 0, to = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR, &from, &to) == 2 && from <= begin && end <= to) return true;
  }
  return false;
}

TEST(LargeBlocksTest, ABlockOfAHugePageAndMoreRunsFromOneHugePageBoundaryToAnother) {
  // A 1M-parameter model (3.8 MiB): its last 1.8 MiB would otherwise fall outside a huge page.
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t bytes = 4000000 + 4096 * 7;  // a size no other test uses
  void* p = AllocateLargeBlock(bytes);
  const auto at = reinterpret_cast<uintptr_t>(p);
  EXPECT_EQ(at % kHugePage, 0u);
  const uintptr_t end = at + (bytes + kHugePage - 1) / kHugePage * kHugePage;
  EXPECT_TRUE(Mapped(at, end)) << "the mapping stops short of the huge-page boundary";
  std::memset(p, 1, bytes);
  FreeLargeBlock(p, bytes);
}
#endif

}  // namespace
}  // namespace plexus
