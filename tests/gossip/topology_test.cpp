#include "gossip/protocol/topology.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <cmath>

#include "tests/testing/status_matchers.h"

namespace plexus::gossip {
namespace {

double Gap(const std::string& spec, size_t n) {
  Result<Topology> t = Topology::Parse(spec, n, 1);
  EXPECT_OK(t.status());
  if (!t.ok()) return -1;
  return SpectralGap(t->MixingMatrix(0), n);
}

// The table of ../shared/design/algorithms.md section 5.3, to 3 decimals.
TEST(SpectralGapTest, ReproducesTheReferenceTable) {
  EXPECT_NEAR(Gap("ring", 16), 0.0508, 5e-4);
  EXPECT_NEAR(Gap("ring", 32), 0.0128, 5e-4);
  EXPECT_NEAR(Gap("ring", 64), 0.0032, 5e-4);
  EXPECT_NEAR(Gap("torus", 64), 0.117, 5e-4);
  EXPECT_NEAR(Gap("torus", 256), 0.0305, 5e-4);
  EXPECT_NEAR(Gap("exponential", 16), 0.400, 5e-4);
  EXPECT_NEAR(Gap("exponential", 64), 0.286, 5e-4);
  EXPECT_NEAR(Gap("exponential", 256), 0.222, 5e-4);
  EXPECT_NEAR(Gap("complete", 16), 1.0, 1e-6);
}

TEST(SpectralGapTest, RandomRegularGraphsMixFast) {
  // d = 4: lambda near 2 sqrt(3) / 4 = 0.87 for A / d; with Metropolis-Hastings weights 1/5 the
  // gap is of the same order, far above a ring's.
  const double gap = Gap("regular:d=4", 128);
  EXPECT_GT(gap, 0.05);
  EXPECT_GT(gap, 10 * Gap("ring", 128));
}

TEST(TopologyTest, OnePeerExponentialAveragesExactlyInLog2NRounds) {
  const size_t n = 16;
  Topology t = *Topology::Parse("onepeer-exponential", n, 0);
  std::vector<double> x(n);
  for (size_t i = 0; i < n; ++i) x[i] = static_cast<double>(i * i);
  const double mean = 1240.0 / 16.0;  // sum of squares 0..15 over 16
  for (uint64_t round = 0; round < 4; ++round) {
    const std::vector<double> w = t.MixingMatrix(round);
    std::vector<double> next(n, 0.0);
    for (size_t i = 0; i < n; ++i) {
      for (size_t j = 0; j < n; ++j) next[i] += w[i * n + j] * x[j];
    }
    x = next;
  }
  for (double v : x) EXPECT_NEAR(v, mean, 1e-9);
}

TEST(TopologyTest, RegularGraphsAreRegularSymmetricAndSeeded) {
  Topology a = *Topology::Parse("regular:d=3", 50, 7);
  Topology b = *Topology::Parse("regular:d=3", 50, 7);
  std::vector<uint32_t> out, back, other;
  for (uint32_t i = 0; i < 50; ++i) {
    a.Out(i, 0, &out);
    EXPECT_EQ(out.size(), 3u);
    b.Out(i, 0, &other);
    EXPECT_EQ(out, other);
    for (uint32_t j : out) {
      EXPECT_NE(j, i);
      a.Out(j, 0, &back);
      EXPECT_TRUE(std::find(back.begin(), back.end(), i) != back.end());
    }
  }
}

TEST(TopologyTest, ImpossibleTopologiesNameTheFlagAndTheReason) {
  auto error = [](const std::string& spec, size_t n) {
    Result<Topology> t = Topology::Parse(spec, n, 0);
    EXPECT_FALSE(t.ok()) << spec;
    return t.ok() ? std::string() : t.status().message();
  };
  EXPECT_NE(error("regular:d=5", 7).find("--topology: regular:d=5 needs N x d even"), std::string::npos);
  EXPECT_NE(error("regular:d=8", 8).find("d < N"), std::string::npos);
  EXPECT_NE(error("torus", 13).find("a, b >= 3"), std::string::npos);
  EXPECT_NE(error("ring", 2).find("at least 3"), std::string::npos);
  EXPECT_NE(error("star", 10).find("unknown topology 'star'"), std::string::npos);
  EXPECT_NE(error("ring:d=2", 10).find("--topology"), std::string::npos);
  EXPECT_NE(error("complete", 1).find("at least 2 nodes"), std::string::npos);
  // dpsgd's default with three peers: the fix is named, and no command's flag for the node count
  // (--clients in the simulator, --num-partitions for peers).
  const std::string few = error("regular:d=4", 3);
  EXPECT_NE(few.find("there are 3: use regular:d=2 or complete"), std::string::npos) << few;
  for (const char* spec : {"regular:d=4", "ring", "torus"})
    EXPECT_EQ(error(spec, 2).find("--clients"), std::string::npos);
}

// Every topology's mixing matrix is doubly stochastic and non-negative, at every round.
RC_GTEST_PROP(TopologyProperty, MixingMatricesAreDoublyStochastic, ()) {
  const int kind = *rc::gen::inRange(0, 6);
  size_t n = 0;
  std::string spec;
  switch (kind) {
    case 0:
      spec = "ring", n = *rc::gen::inRange<size_t>(3, 40);
      break;
    case 1:
      spec = "torus", n = *rc::gen::inRange<size_t>(3, 7) * *rc::gen::inRange<size_t>(3, 7);
      break;
    case 2:
      spec = "exponential", n = *rc::gen::inRange<size_t>(2, 40);
      break;
    case 3:
      spec = "onepeer-exponential", n = *rc::gen::inRange<size_t>(2, 40);
      break;
    case 4: {
      const size_t d = *rc::gen::inRange<size_t>(2, 6);
      n = *rc::gen::inRange<size_t>(d + 1, 40);
      if ((n * d) % 2) ++n;
      spec = "regular:d=" + std::to_string(d);
      break;
    }
    default:
      spec = "complete", n = *rc::gen::inRange<size_t>(2, 30);
  }
  const uint64_t seed = *rc::gen::arbitrary<uint64_t>();
  Result<Topology> t = Topology::Parse(spec, n, seed);
  RC_ASSERT(t.ok());
  const uint64_t round = *rc::gen::inRange<uint64_t>(0, 20);
  const std::vector<double> w = t->MixingMatrix(round);
  for (size_t i = 0; i < n; ++i) {
    double row = 0.0, column = 0.0;
    for (size_t j = 0; j < n; ++j) {
      RC_ASSERT(w[i * n + j] >= 0.0);
      row += w[i * n + j];
      column += w[j * n + i];
    }
    RC_ASSERT(std::abs(row - 1.0) < 1e-12);
    RC_ASSERT(std::abs(column - 1.0) < 1e-12);
  }
}

}  // namespace
}  // namespace plexus::gossip
