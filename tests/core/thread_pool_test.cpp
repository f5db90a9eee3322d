#include "core/thread_pool.h"

#include <atomic>
#include <vector>

#include <gtest/gtest.h>

namespace plexus {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  for (size_t threads : {1u, 2u, 4u}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 5u, 100000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.ParallelFor(
          n,
          [&](size_t b, size_t e) {
            for (size_t i = b; i < e; ++i) hits[i]++;
          },
          16);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << threads << " " << n << " " << i;
    }
  }
}

TEST(ThreadPoolTest, UsesSeveralRangesForLargeInputs) {
  ThreadPool pool(2);
  std::atomic<int> calls{0};
  pool.ParallelFor(1 << 20, [&](size_t, size_t) { calls++; });
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace plexus
