#include "core/large_blocks.h"

#include <gtest/gtest.h>

#include <cstring>
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

}  // namespace
}  // namespace plexus
