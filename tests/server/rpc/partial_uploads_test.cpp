#include "server/rpc/partial_uploads.h"

#include <gtest/gtest.h>

#include "core/clock.h"
#include "core/model_state.h"

namespace plexus {
namespace {

// What arrived of an upload of `bytes`: its first `n` bytes, decoded as they came.
SafetensorsStreamDecoder Arrived(const std::string& bytes, size_t n) {
  SafetensorsStreamDecoder d(bytes.size());
  EXPECT_TRUE(d.Append(std::string_view(bytes).substr(0, n)).ok());
  return d;
}

TEST(PartialUploadsTest, KeepsOnePerClientForItsTaskUntilItsTimeIsUp) {
  ManualClock clock;
  PartialUploads partial(&clock, /*budget_bytes=*/1 << 20, /*ttl_ms=*/1000);
  const std::string bytes = EncodeSafetensors(*ModelState::Create({{"w", {64}}}));
  partial.Keep("a", "t1", bytes.size(), Arrived(bytes, 100));
  EXPECT_EQ(partial.HeldBytes("a", "t1", bytes.size()), 100u);
  EXPECT_EQ(partial.HeldBytes("a", "t2", bytes.size()), 0u);   // another task
  EXPECT_EQ(partial.HeldBytes("b", "t1", bytes.size()), 0u);   // another client
  partial.Keep("a", "t1", bytes.size(), Arrived(bytes, 120));  // a newer one replaces it
  EXPECT_EQ(partial.HeldBytes("a", "t1", bytes.size()), 120u);
  clock.AdvanceMs(1001);  // on the injected clock, not the wall clock
  EXPECT_EQ(partial.HeldBytes("a", "t1", bytes.size()), 0u);
  EXPECT_FALSE(partial.Take("a", "t1", bytes.size()).has_value());
}

TEST(PartialUploadsTest, TakeHandsTheStreamBackOnceAndTheBudgetDropsTheOldest) {
  ManualClock clock;
  const std::string bytes = EncodeSafetensors(*ModelState::Create({{"w", {64}}}));
  PartialUploads partial(&clock, /*budget_bytes=*/2 * bytes.size(), /*ttl_ms=*/60000);
  partial.Keep("a", "ta", bytes.size(), Arrived(bytes, 50));
  clock.AdvanceMs(1);
  partial.Keep("b", "tb", bytes.size(), Arrived(bytes, 60));
  clock.AdvanceMs(1);
  partial.Keep("c", "tc", bytes.size(), Arrived(bytes, 70));  // over the budget: a's goes
  EXPECT_EQ(partial.HeldBytes("a", "ta", bytes.size()), 0u);
  std::optional<SafetensorsStreamDecoder> b = partial.Take("b", "tb", bytes.size());
  ASSERT_TRUE(b.has_value());
  EXPECT_EQ(b->received(), 60u);
  EXPECT_FALSE(partial.Take("b", "tb", bytes.size()).has_value());
  EXPECT_EQ(partial.HeldBytes("c", "tc", bytes.size()), 70u);
}

}  // namespace
}  // namespace plexus
