#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numbers>
#include <tuple>
#include <vector>

#include "compression/chunked_dct.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"
#include "core/rng.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(ChunkedDctTest, TwoValuesByHandAndAShorterLastChunk) {
  // N = 2: X0 = (x0 + x1) / sqrt 2, X1 = (x0 - x1) / sqrt 2 (cos(pi/4) = -cos(3pi/4) = 1/sqrt 2).
  // The last chunk of one value: X0 = x0 (sqrt(2/1) / sqrt 2).
  const ChunkedDct dct(2);
  const std::vector<float> x = {3.0f, 1.0f, 5.0f};
  std::vector<double> c(3);
  dct.Forward(x, c);
  EXPECT_NEAR(c[0], 4.0 / std::numbers::sqrt2, 1e-12);
  EXPECT_NEAR(c[1], 2.0 / std::numbers::sqrt2, 1e-12);
  EXPECT_NEAR(c[2], 5.0, 1e-12);
  std::vector<float> back(3);
  dct.Inverse(c, back);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(back[i], x[i], 1e-6) << i;
}

// Row j, column i of the transform for a chunk of n values, computed as chunked_dct.cpp computes
// its tables: sqrt(2/n) c_j cos(pi (i + 1/2) j / n).
double DctEntry(size_t n, size_t j, size_t i) {
  const double scale = std::sqrt(2.0 / static_cast<double>(n));
  const double c = j == 0 ? std::numbers::sqrt2 / 2 : 1.0;
  return scale * c *
         std::cos(std::numbers::pi * (static_cast<double>(i) + 0.5) * static_cast<double>(j) / static_cast<double>(n));
}

// 0 + term(0) + term(1) + ... + term(n - 1), in that order, each term rounded on its own
// (volatile: never fused into a multiply-add).
template <typename Term>
double SumInOrder(size_t n, Term term) {
  double sum = 0.0;
  for (size_t k = 0; k < n; ++k) {
    volatile double product = term(k);
    sum += product;
  }
  return sum;
}

// The forward transform adds a column of the matrix at a time, all coefficients side by side (a
// loop the compiler vectorizes, for the widest vectors the CPU has); each coefficient must keep the
// bits of its sum as the definition reads it: sum = 0, then + C[j][i] x_i for i = 0, 1, ... (each
// product rounded: chunked_dct.cpp compiles without fused multiply-adds, so the bits are the same
// on every CPU). The same for the inverse, whose rows are added side by side (its values are
// floats, so an order changed in the sums' last double bits would seldom show; what shows is a row
// or a term wrong).
TEST(ChunkedDctTest, EachCoefficientAndValueHasTheBitsOfItsSumInTheDefinitionsOrder) {
  Rng rng(11);
  std::vector<float> x(1000);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  for (const size_t chunk : {size_t{64}, size_t{7}, size_t{256}}) {  // 1000 leaves a shorter last chunk
    const ChunkedDct dct(chunk);
    std::vector<double> got(x.size());
    dct.Forward(x, got);
    size_t wrong = 0;
    for (size_t begin = 0; begin < x.size(); begin += chunk) {
      const size_t n = std::min(chunk, x.size() - begin);
      for (size_t j = 0; j < n; ++j) {
        const double sum =
            SumInOrder(n, [&](size_t i) { return DctEntry(n, j, i) * static_cast<double>(x[begin + i]); });
        wrong += std::bit_cast<uint64_t>(got[begin + j]) != std::bit_cast<uint64_t>(sum);
      }
    }
    EXPECT_EQ(wrong, 0u) << "chunk " << chunk;
    // And back from every third coefficient (the others zero, as a decoded top-k leaves them):
    // each value the sum of its rows' terms in the order of j, rounded to float once.
    for (size_t j = 0; j < got.size(); ++j) {
      if (j % 3 != 0) got[j] = 0.0;
    }
    std::vector<float> back(x.size());
    dct.Inverse(got, back);
    size_t wrong_back = 0;
    for (size_t begin = 0; begin < x.size(); begin += chunk) {
      const size_t n = std::min(chunk, x.size() - begin);
      for (size_t i = 0; i < n; ++i) {
        // A zero coefficient's term is 0: the sum stays as when the transform skips its row.
        const double sum =
            SumInOrder(n, [&](size_t j) { return got[begin + j] == 0.0 ? 0.0 : DctEntry(n, j, i) * got[begin + j]; });
        wrong_back += std::bit_cast<uint32_t>(back[begin + i]) != std::bit_cast<uint32_t>(static_cast<float>(sum));
      }
    }
    EXPECT_EQ(wrong_back, 0u) << "chunk " << chunk;
  }
}

RC_GTEST_PROP(ChunkedDctProperty, TheInverseUndoesItAndTheEnergyIsKept, ()) {
  const auto chunk = *rc::gen::inRange<size_t>(1, 70);
  const auto values = *rc::gen::container<std::vector<float>>(
      rc::gen::map(rc::gen::inRange(-1000000, 1000000), [](int v) { return static_cast<float>(v) / 1000.0f; }));
  const ChunkedDct dct(chunk);
  std::vector<double> c(values.size());
  dct.Forward(values, c);
  double energy = 0, coefficient_energy = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    energy += static_cast<double>(values[i]) * values[i];
    coefficient_energy += c[i] * c[i];
  }
  RC_ASSERT(std::abs(energy - coefficient_energy) <= 1e-9 * std::max(1.0, energy));
  std::vector<float> back(values.size());
  dct.Inverse(c, back);
  for (size_t i = 0; i < values.size(); ++i) RC_ASSERT(std::abs(back[i] - values[i]) <= 1e-3f);
}

// Two tensors of 130 and 7 values: two whole chunks of 64 and a last one of 2, then a chunk of 7.
ModelState Layout() { return *ModelState::Create({{"a", {130}}, {"b", {7}}}); }

// A delta that is the sum of `k` cosines of each chunk: k-sparse in the DCT domain, so the top-k
// codec sends it whole.
ModelState SparseInDct(size_t chunk, size_t k, uint64_t seed) {
  ModelState d = Layout();
  Rng rng(seed);
  std::vector<double> c(d.num_params(), 0.0);
  for (const TensorSlot& t : d.tensors()) {
    for (size_t begin = t.offset; begin < t.offset + t.numel; begin += chunk) {
      const size_t len = std::min(chunk, t.offset + t.numel - begin);
      for (size_t j = 0; j < std::min(k, len); ++j) c[begin + rng.Below(len)] = rng.Normal();
    }
  }
  const ChunkedDct dct(chunk);
  for (const TensorSlot& t : d.tensors()) {
    dct.Inverse(std::span<const double>(c).subspan(t.offset, t.numel), d.data().subspan(t.offset, t.numel));
  }
  return d;
}

TEST(DctCodecTest, ADeltaSparseInTheDctDomainArrivesWholeAtAFractionOfItsBytes) {
  const ModelState d = SparseInDct(64, 8, 1);
  auto codec = *MakeCodec("dct:chunk=64,k=8");
  ModelState residual = ModelState::ZerosLike(d);
  const std::string bytes = codec->Encode(d, &residual, 0);
  // Chunks of 64, 64, 2 and 7 values send 8, 8, 2 and 7 coefficients: 25 x 5 bytes.
  EXPECT_EQ(bytes.size(), codec->EncodedSize(d));
  EXPECT_EQ(bytes.size(), codec_wire::kHeaderBytes + 8 + 25 * 5);
  Result<ModelState> back = codec->Decode(bytes, d);
  ASSERT_OK(back);
  for (size_t i = 0; i < d.num_params(); ++i) {
    EXPECT_NEAR(back->data()[i], d.data()[i], 1e-5) << i;
    EXPECT_NEAR(residual.data()[i], 0.0f, 1e-5) << i;  // nothing left behind
  }
}

// The encoder against its definition, chunk by chunk: the coefficients sorted by magnitude
// (descending; ties to the lower index), the first k taken, sent in index order; with error
// feedback the residual becomes v - inverse(sent), v = delta + decay x residual. Chunks of zeros
// (every coefficient ties) and shorter last chunks included; k below, at and above a chunk.
TEST(DctCodecTest, EachChunkSendsItsLargestCoefficientsWithTiesToTheLowerIndex) {
  ModelState d = *ModelState::Create({{"a", {1000}}, {"b", {37}}});
  Rng rng(5);
  for (size_t i = 0; i < d.num_params(); ++i) d.data()[i] = (i / 64) % 5 == 1 ? 0.0f : static_cast<float>(rng.Normal());
  ModelState start = ModelState::ZerosLike(d);
  for (size_t i = 0; i < d.num_params(); ++i) {
    if (d.data()[i] != 0.0f) start.data()[i] = static_cast<float>(rng.Normal() * 0.1);  // zero chunks stay zero
  }
  for (const auto& [spec, chunk, k] :
       {std::tuple{"dct:decay=0.5", 64, 8}, std::tuple{"dct:chunk=16,k=16,decay=0.5", 16, 16},
        std::tuple{"dct:chunk=7,k=3,decay=0.5", 7, 3}, std::tuple{"dct:chunk=256,k=1,decay=0.5", 256, 1}}) {
    const ChunkedDct dct(chunk);
    ModelState residual = start;
    const std::string bytes = (*MakeCodec(spec))->Encode(d, &residual, 0);
    std::string want = bytes.substr(0, codec_wire::kHeaderBytes + 8);
    std::vector<float> want_residual(d.num_params());
    for (const TensorSlot& t : d.tensors()) {
      for (size_t begin = t.offset, end = t.offset + t.numel; begin < end; begin += chunk) {
        const size_t len = std::min<size_t>(chunk, end - begin);
        std::vector<float> v(len);
        for (size_t i = 0; i < len; ++i) v[i] = d.data()[begin + i] + 0.5f * start.data()[begin + i];
        std::vector<double> c(len), sent(len, 0.0);
        dct.Forward(v, c);
        std::vector<uint32_t> order(len);
        for (uint32_t i = 0; i < len; ++i) order[i] = i;
        std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
          return std::abs(c[a]) != std::abs(c[b]) ? std::abs(c[a]) > std::abs(c[b]) : a < b;
        });
        order.resize(std::min<size_t>(k, len));
        std::sort(order.begin(), order.end());
        for (uint32_t i : order) {
          const auto value = static_cast<float>(c[i]);
          want.push_back(static_cast<char>(i));
          want.append(reinterpret_cast<const char*>(&value), 4);
          sent[i] = value;
        }
        std::vector<float> carried(len);
        dct.Inverse(sent, carried);
        for (size_t i = 0; i < len; ++i) want_residual[begin + i] = v[i] - carried[i];
      }
    }
    EXPECT_TRUE(bytes == want) << spec;
    EXPECT_EQ(0, std::memcmp(residual.data().data(), want_residual.data(), 4 * want_residual.size())) << spec;
  }
}

TEST(DctCodecTest, WhatIsNotSentWaitsInTheDecayingResidual) {
  ModelState d = Layout();
  Rng rng(2);
  for (float& x : d.data()) x = static_cast<float>(rng.Normal());
  auto codec = *MakeCodec("dct:chunk=16,k=2,decay=0.5");
  EXPECT_EQ(codec->Describe(), "dct(chunk=16,k=2,decay=0.5)");
  ModelState residual = ModelState::ZerosLike(d);
  residual.data()[3] = 4.0f;  // left from the last task; halved before this delta joins it
  const ModelState before = residual;
  Result<ModelState> sent = codec->Decode(codec->Encode(d, &residual, 0), d);
  ASSERT_OK(sent);
  double sent_energy = 0, total_energy = 0;
  for (size_t i = 0; i < d.num_params(); ++i) {
    const double v = d.data()[i] + 0.5 * before.data()[i];
    // Nothing lost: what was sent plus what stays is the delta plus the decayed residual.
    EXPECT_NEAR(sent->data()[i] + residual.data()[i], v, 1e-5) << i;
    sent_energy += static_cast<double>(sent->data()[i]) * sent->data()[i];
    total_energy += v * v;
  }
  // The two largest of sixteen coefficients carry more than 2/16 of a chunk's energy.
  EXPECT_GT(sent_energy, total_energy * 2 / 16);
  EXPECT_LT(sent_energy, total_energy);
}

TEST(DctCodecTest, BadBytesAndSpecsAreRefused) {
  const ModelState d = SparseInDct(64, 8, 3);
  auto codec = *MakeCodec("dct");  // chunk 64, k 8
  const std::string good = codec->Encode(d, nullptr, 0);
  const size_t first = codec_wire::kHeaderBytes + 8;  // the first entry: u8 index, f32 value
  std::string bad = good;
  bad[first] = static_cast<char>(200);  // beyond the chunk of 64
  EXPECT_THAT(codec->Decode(bad, d), StatusIs(StatusCode::kInvalidArgument, "out of range or out of order"));
  bad = good;
  bad[first + 5] = bad[first];  // the second index equal to the first
  EXPECT_THAT(codec->Decode(bad, d), StatusIs(StatusCode::kInvalidArgument, "out of range or out of order"));
  bad = good;
  const float nan = std::nanf("");
  std::memcpy(bad.data() + first + 1, &nan, 4);
  EXPECT_THAT(codec->Decode(bad, d), StatusIs(StatusCode::kInvalidArgument, "not finite"));
  EXPECT_THAT(codec->Decode(good.substr(0, good.size() - 1), d), StatusIs(StatusCode::kInvalidArgument, ""));
  EXPECT_THAT((*MakeCodec("dct:chunk=32"))->Decode(good, d), StatusIs(StatusCode::kInvalidArgument, ""));
  for (const char* spec : {"dct:chunk=0", "dct:chunk=300", "dct:k=0", "dct:chunk=4,k=5", "dct:decay=2"}) {
    Result<std::unique_ptr<Codec>> c = MakeCodec(spec);
    ASSERT_FALSE(c.ok()) << spec;
    EXPECT_EQ(c.status().message().rfind("--codec: ", 0), 0u) << c.status().message();
  }
}

}  // namespace
}  // namespace plexus
