#include "aggregators/simd_kernels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "aggregators/coordinate_wise.h"
#include "core/rng.h"

namespace plexus {
namespace {

// Columns drawn from few values, so that ties are common, and both signed zeros.
std::vector<std::vector<float>> RowsWithTies(size_t rows, size_t len, Rng& rng) {
  const float values[] = {0.0f, -0.0f, 1.0f, -1.0f, 2.5f, -3.0f, 1e-30f, 7.0f};
  std::vector<std::vector<float>> out(rows, std::vector<float>(len));
  for (auto& row : out) {
    for (float& x : row) x = values[rng.Below(8)];
  }
  return out;
}

std::vector<uint32_t> Bits(const float* column, size_t count, size_t stride) {
  std::vector<uint32_t> bits;
  for (size_t i = 0; i < count; ++i) bits.push_back(std::bit_cast<uint32_t>(column[i * stride]));
  return bits;
}

// Each comparator kernel is written for three instruction sets (simd_kernels.h); every test below
// runs once per set this CPU runs (skipped otherwise) and compares its bits with the portable
// kernel's. Lengths cover the sixteen-, eight- and one-column steps of each kernel and its tails.
class SortGroupsOf16Test : public testing::TestWithParam<simd::ComparatorIsa> {};
class SortRowsUnder16Test : public testing::TestWithParam<simd::ComparatorIsa> {};
class ApplyComparatorsTest : public testing::TestWithParam<simd::ComparatorIsa> {};
class ApplyComparatorTilesTest : public testing::TestWithParam<simd::ComparatorIsa> {};

std::string IsaName(const testing::TestParamInfo<simd::ComparatorIsa>& info) {
  switch (info.param) {
    case simd::ComparatorIsa::kPortable:
      return "Portable";
    case simd::ComparatorIsa::kAvx2:
      return "Avx2";
    case simd::ComparatorIsa::kAvx512:
      return "Avx512";
  }
  return "Unknown";
}

TEST_P(SortGroupsOf16Test, SortsEachColumnAsAPermutationWithTheSameBitsOnEveryPath) {
  const simd::ComparatorIsa isa = GetParam();
  if (!simd::CpuRuns(isa)) GTEST_SKIP() << "this CPU does not run these kernels";
  Rng rng(21);
  for (size_t groups : {1u, 2u}) {
    for (size_t len : {1u, 3u, 7u, 8u, 9u, 15u, 16u, 17u, 31u, 80u}) {
      const std::vector<std::vector<float>> data = RowsWithTies(16 * groups, len, rng);
      std::vector<const float*> rows;
      for (const auto& row : data) rows.push_back(row.data());
      const size_t stride = len + 3;  // rows of the block further apart than their length
      std::vector<float> kernel(16 * groups * stride, 42.0f), portable = kernel;
      simd::SortGroupsOf16(isa, kernel.data(), stride, rows.data(), groups, len);
      simd::SortGroupsOf16(simd::ComparatorIsa::kPortable, portable.data(), stride, rows.data(), groups, len);
      // Both kernels give the same bits, signed zeros included, and leave what lies past `len`
      // in each row alone.
      ASSERT_EQ(Bits(kernel.data(), kernel.size(), 1), Bits(portable.data(), portable.size(), 1))
          << "groups " << groups << " len " << len;
      for (size_t g = 0; g < groups; ++g) {
        for (size_t c = 0; c < len; ++c) {
          const float* column = kernel.data() + 16 * g * stride + c;
          std::vector<float> in;
          for (size_t i = 0; i < 16; ++i) in.push_back(data[16 * g + i][c]);
          // Sorted, and the same multiset of bit patterns: a comparator swaps, it never copies
          // one zero over the other.
          for (size_t i = 1; i < 16; ++i) ASSERT_LE(column[(i - 1) * stride], column[i * stride]);
          std::vector<uint32_t> got = Bits(column, 16, stride), want = Bits(in.data(), 16, 1);
          std::sort(got.begin(), got.end());
          std::sort(want.begin(), want.end());
          ASSERT_EQ(got, want) << "groups " << groups << " len " << len << " column " << c;
        }
        for (size_t i = 0; i < 16; ++i) {
          for (size_t c = len; c < stride; ++c) ASSERT_EQ(kernel[(16 * g + i) * stride + c], 42.0f);
        }
      }
    }
  }
}

// Every row count under 16, as the rows left after the groups of 16 and the whole of fewer rows:
// sorted, each column a permutation of its bits, the same bits on both paths, nothing written past
// `len` or below the n rows.
TEST_P(SortRowsUnder16Test, SortsEachColumnAsAPermutationWithTheSameBitsOnEveryPath) {
  const simd::ComparatorIsa isa = GetParam();
  if (!simd::CpuRuns(isa)) GTEST_SKIP() << "this CPU does not run these kernels";
  Rng rng(24);
  for (size_t n = 0; n < 16; ++n) {
    for (size_t len : {1u, 7u, 8u, 9u, 17u, 31u, 80u}) {
      const std::vector<std::vector<float>> data = RowsWithTies(n, len, rng);
      std::vector<const float*> rows;
      for (const auto& row : data) rows.push_back(row.data());
      const size_t stride = len + 3;
      std::vector<float> kernel((n + 1) * stride, 42.0f), portable = kernel;
      simd::SortRowsUnder16(isa, kernel.data(), stride, rows.data(), n, len);
      simd::SortRowsUnder16(simd::ComparatorIsa::kPortable, portable.data(), stride, rows.data(), n, len);
      ASSERT_EQ(Bits(kernel.data(), kernel.size(), 1), Bits(portable.data(), portable.size(), 1))
          << "n " << n << " len " << len;
      for (size_t c = 0; c < len; ++c) {
        const float* column = kernel.data() + c;
        std::vector<float> in;
        for (size_t i = 0; i < n; ++i) in.push_back(data[i][c]);
        for (size_t i = 1; i < n; ++i) ASSERT_LE(column[(i - 1) * stride], column[i * stride]) << "n " << n;
        std::vector<uint32_t> got = Bits(column, n, stride), want = Bits(in.data(), n, 1);
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        ASSERT_EQ(got, want) << "n " << n << " len " << len << " column " << c;
      }
      for (size_t i = 0; i <= n; ++i) {
        for (size_t c = i < n ? len : 0; c < stride; ++c) ASSERT_EQ(kernel[i * stride + c], 42.0f) << "n " << n;
      }
    }
  }
}

TEST_P(ApplyComparatorsTest, SwapsOnlyWhenTheSecondIsSmallerWithTheSameBitsOnEveryPath) {
  const simd::ComparatorIsa isa = GetParam();
  if (!simd::CpuRuns(isa)) GTEST_SKIP() << "this CPU does not run these kernels";
  // Batcher's network for 20 rows over columns with ties and both zeros: every column ends sorted
  // and a permutation of its bits (std::max(a, b) would copy +0 over -0), on both paths.
  Rng rng(22);
  std::vector<uint32_t> pairs;
  for (const auto& [a, b] : SortingNetwork(20)) {
    pairs.push_back(a);
    pairs.push_back(b);
  }
  for (size_t len : {1u, 5u, 8u, 13u, 31u, 80u}) {
    const std::vector<std::vector<float>> data = RowsWithTies(20, len, rng);
    std::vector<float> kernel(20 * len);
    for (size_t i = 0; i < 20; ++i) std::copy(data[i].begin(), data[i].end(), kernel.begin() + i * len);
    std::vector<float> portable = kernel;
    simd::ApplyComparators(isa, kernel.data(), len, pairs.data(), pairs.size() / 2, len);
    simd::ApplyComparators(simd::ComparatorIsa::kPortable, portable.data(), len, pairs.data(), pairs.size() / 2, len);
    ASSERT_EQ(Bits(kernel.data(), kernel.size(), 1), Bits(portable.data(), portable.size(), 1)) << len;
    for (size_t c = 0; c < len; ++c) {
      for (size_t i = 1; i < 20; ++i) ASSERT_LE(kernel[(i - 1) * len + c], kernel[i * len + c]);
      std::vector<uint32_t> got = Bits(kernel.data() + c, 20, len), want;
      for (size_t i = 0; i < 20; ++i) want.push_back(std::bit_cast<uint32_t>(data[i][c]));
      std::sort(got.begin(), got.end());
      std::sort(want.begin(), want.end());
      ASSERT_EQ(got, want) << "len " << len << " column " << c;
    }
  }
}

// Each tile shape is the layers its comment lists, swapping only when the higher place holds
// the smaller value, on both paths with the same bits; rows are anywhere in the block, and two
// places may share a row of +infinity, which no comparator changes.
TEST_P(ApplyComparatorTilesTest, EachShapeIsItsLayersWithTheSameBitsOnEveryPath) {
  const simd::ComparatorIsa isa = GetParam();
  if (!simd::CpuRuns(isa)) GTEST_SKIP() << "this CPU does not run these kernels";
  using Layer = std::vector<std::pair<size_t, size_t>>;
  const Layer mirror = {{0, 7}, {1, 6}, {2, 5}, {3, 4}}, half4 = {{0, 4}, {1, 5}, {2, 6}, {3, 7}},
              half2 = {{0, 2}, {1, 3}, {4, 6}, {5, 7}}, half1 = {{0, 1}, {2, 3}, {4, 5}, {6, 7}};
  const std::vector<std::pair<simd::TileLayers, std::vector<Layer>>> shapes = {
      {simd::TileLayers::kMirrorHalf2Half1, {mirror, half2, half1}},
      {simd::TileLayers::kHalf4Half2Half1, {half4, half2, half1}},
      {simd::TileLayers::kHalf2Half1Mirror, {half2, half1, mirror}},
      {simd::TileLayers::kMirrorHalf2Half1Lower, {mirror, {{0, 2}, {1, 3}}, {{0, 1}, {2, 3}}}},
      {simd::TileLayers::kMirrorHalf2Half1Upper, {mirror, {{4, 6}, {5, 7}}, {{4, 5}, {6, 7}}}},
      {simd::TileLayers::kHalf2Half1, {half2, half1}}};
  Rng rng(23);
  constexpr size_t kRows = 12;  // row 11: +infinity
  for (const auto& [shape, layers] : shapes) {
    for (bool with_infinity : {false, true}) {
      for (size_t len : {1u, 7u, 8u, 13u, 31u, 80u}) {
        const size_t stride = len + 3;
        const std::vector<std::vector<float>> data = RowsWithTies(kRows, len, rng);
        std::vector<float> kernel(kRows * stride, 42.0f);
        for (size_t i = 0; i < kRows; ++i) {
          for (size_t c = 0; c < len; ++c) {
            kernel[i * stride + c] = i == kRows - 1 ? std::numeric_limits<float>::infinity() : data[i][c];
          }
        }
        std::vector<float> portable = kernel, want = kernel;
        simd::ComparatorTile tile{{9, 1, 4, 0, 10, 2, 7, 5}, shape};
        if (with_infinity) tile.rows[6] = tile.rows[7] = kRows - 1;
        simd::ApplyComparatorTiles(isa, kernel.data(), stride, &tile, 1, len);
        simd::ApplyComparatorTiles(simd::ComparatorIsa::kPortable, portable.data(), stride, &tile, 1, len);
        ASSERT_EQ(Bits(kernel.data(), kernel.size(), 1), Bits(portable.data(), portable.size(), 1))
            << static_cast<int>(shape) << " len " << len;
        for (size_t c = 0; c < len; ++c) {
          for (const Layer& layer : layers) {
            for (const auto& [a, b] : layer) {
              float& x = want[tile.rows[a] * stride + c];
              float& y = want[tile.rows[b] * stride + c];
              if (y < x) std::swap(x, y);
            }
          }
        }
        ASSERT_EQ(Bits(kernel.data(), kernel.size(), 1), Bits(want.data(), want.size(), 1))
            << static_cast<int>(shape) << " len " << len << (with_infinity ? " with +infinity" : "");
      }
    }
  }
}

const auto kIsas =
    testing::Values(simd::ComparatorIsa::kPortable, simd::ComparatorIsa::kAvx2, simd::ComparatorIsa::kAvx512);
INSTANTIATE_TEST_SUITE_P(Isa, SortGroupsOf16Test, kIsas, IsaName);
INSTANTIATE_TEST_SUITE_P(Isa, SortRowsUnder16Test, kIsas, IsaName);
INSTANTIATE_TEST_SUITE_P(Isa, ApplyComparatorsTest, kIsas, IsaName);
INSTANTIATE_TEST_SUITE_P(Isa, ApplyComparatorTilesTest, kIsas, IsaName);

}  // namespace
}  // namespace plexus
