#include "core/large_block_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "core/large_blocks.h"
#include "core/model_state.h"
#include "tests/testing/heap_block_lender.h"

namespace plexus {
namespace {

constexpr int64_t kParams = 400000;  // 1.6 MB: a large block
constexpr size_t kBytes = kParams * sizeof(float);

TEST(LargeBlockSourceTest, AScopeRoutesThisThreadsLargeBlocksAndFreeingGivesThemBack) {
  auto source = std::make_shared<testing::HeapBlockLender>(kBytes);
  const size_t before = LargeBlocksFromSources();
  std::optional<ModelState> routed, other_size;
  {
    const ScopedLargeBlockSource scope(source);
    routed = *ModelState::Create({{"w", {kParams}}});
    other_size = *ModelState::Create({{"w", {kParams + 1}}});  // declined: the heap serves it
    // Another thread is not routed.
    std::thread([&] {
      ModelState elsewhere = *ModelState::Create({{"w", {kParams}}});
      EXPECT_FALSE(source->lent(elsewhere.data().data()));
    }).join();
  }
  EXPECT_TRUE(source->lent(routed->data().data()));
  EXPECT_FALSE(source->lent(other_size->data().data()));
  EXPECT_EQ(LargeBlocksFromSources(), before + 1);
  // After the scope, on another thread: the block still goes back to its source.
  ModelState after = *ModelState::Create({{"w", {kParams}}});
  EXPECT_FALSE(source->lent(after.data().data()));
  std::thread([&] { routed.reset(); }).join();
  EXPECT_EQ(source->given_back(), 1);
  EXPECT_EQ(LargeBlocksFromSources(), before);
}

TEST(LargeBlockSourceTest, ScopesNestAndANullSourceChangesNothing) {
  auto outer = std::make_shared<testing::HeapBlockLender>(kBytes);
  auto inner = std::make_shared<testing::HeapBlockLender>(kBytes);
  const ScopedLargeBlockSource a(outer);
  {
    const ScopedLargeBlockSource b(inner);
    const ScopedLargeBlockSource none(nullptr);
    ModelState m = *ModelState::Create({{"w", {kParams}}});
    EXPECT_TRUE(inner->lent(m.data().data()));
  }
  ModelState m = *ModelState::Create({{"w", {kParams}}});
  EXPECT_TRUE(outer->lent(m.data().data()));
  EXPECT_EQ(inner->given_back(), 1);
}

TEST(LargeBlockSourceTest, ASourceLivesUntilItsLastBlockIsFreed) {
  std::weak_ptr<testing::HeapBlockLender> watch;
  void* p = nullptr;
  {
    auto source = std::make_shared<testing::HeapBlockLender>(kBytes);
    watch = source;
    const ScopedLargeBlockSource scope(std::move(source));
    p = AllocateLargeBlock(kBytes);
  }
  ASSERT_FALSE(watch.expired());
  std::memset(p, 1, kBytes);
  FreeLargeBlock(p, kBytes);
  EXPECT_TRUE(watch.expired());
}

}  // namespace
}  // namespace plexus
