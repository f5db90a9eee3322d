#include "compression/codec.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/rng.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// Two tensors of 1000 and 37 values, normal with a few large ones.
ModelState RandomDelta(uint64_t seed) {
  ModelState m = *ModelState::Create({{"a", {10, 100}}, {"b", {37}}});
  Rng rng(seed);
  for (float& x : m.data()) x = static_cast<float>(rng.Normal() * 0.01);
  m.data()[5] = 3.0f;
  m.data()[1010] = -2.0f;
  return m;
}

ModelState RoundTrip(const std::string& spec, const ModelState& d, ModelState* residual = nullptr, uint64_t seed = 1) {
  auto codec = *MakeCodec(spec);
  const std::string bytes = codec->Encode(d, residual, seed);
  EXPECT_EQ(bytes.size(), codec->EncodedSize(d)) << spec;
  Result<ModelState> out = codec->Decode(bytes, d);
  EXPECT_OK(out.status());
  return out.ok() ? std::move(out).value() : ModelState();
}

TEST(CodecTest, LosslessAndHalfPrecisionRoundTrips) {
  const ModelState d = RandomDelta(1);
  EXPECT_EQ(RoundTrip("f32", d), d);
  const ModelState h = RoundTrip("fp16", d), b = RoundTrip("bf16", d);
  for (size_t i = 0; i < d.num_params(); ++i) {
    const float x = d.data()[i];
    EXPECT_LE(std::abs(h.data()[i] - x), std::abs(x) * 0x1p-11f + 0x1p-25f) << i;  // half ulp (+ subnormal step)
    EXPECT_LE(std::abs(b.data()[i] - x), std::abs(x) * 0x1p-8f) << i;
  }
  EXPECT_EQ(*MakeCodec("fp16").value()->Encode(d, nullptr, 0).data(), 'P');
  EXPECT_EQ(MakeCodec("fp16").value()->EncodedSize(d), 13 + 2 * d.num_params());  // half of float32
}

// binary16 conversion written plainly, branch by branch: the oracle for the codec's branch-free
// (vectorizable) conversions. Round to nearest even; beyond the largest half, saturate.
uint16_t ReferenceToHalf(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mant = x & 0x007fffffu;
  const int32_t exp = static_cast<int32_t>((x >> 23) & 0xffu);
  const int32_t e = exp - 127 + 15;
  if (exp == 0xff || e >= 0x1f) return static_cast<uint16_t>(sign | 0x7bffu);
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);
    mant |= 0x00800000u;
    const auto shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  if ((half & 0x7c00u) == 0x7c00u) half = 0x7bffu;
  return static_cast<uint16_t>(sign | half);
}

float ReferenceFromHalf(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
  if (exp == 0) {
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  return std::bit_cast<float>(sign | ((exp - 15 + 127) << 23) | (mant << 13));
}

TEST(CodecTest, Fp16MatchesThePlainConversionBitForBit) {
  // Finite floats across every exponent (one bit pattern in 4093, plus the edges of rounding),
  // through the codec; then every finite half back.
  std::vector<float> values;
  for (uint64_t bits = 0; bits < 0x7f800000u; bits += 4093) {
    values.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
    values.push_back(-std::bit_cast<float>(static_cast<uint32_t>(bits)));
  }
  for (float edge : {65504.0f, 65519.99f, 65520.0f, 3.0e38f, 0x1p-14f, 0x1p-24f, 0x1p-25f, 0x1.8p-25f, 0x1.002p-14f}) {
    values.push_back(edge);
  }
  ModelState m = *ModelState::Create({{"v", {static_cast<int64_t>(values.size())}}});
  std::copy(values.begin(), values.end(), m.data().begin());
  const std::string bytes = (*MakeCodec("fp16"))->Encode(m, nullptr, 0);
  ASSERT_EQ(bytes.size(), 13 + 2 * values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, bytes.data() + 13 + 2 * i, 2);
    ASSERT_EQ(h, ReferenceToHalf(values[i]))
        << "value " << values[i] << " (bits " << std::hex << std::bit_cast<uint32_t>(values[i]) << ")";
  }
  std::vector<uint16_t> halves;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    if ((h & 0x7c00u) != 0x7c00u) halves.push_back(static_cast<uint16_t>(h));  // finite only
  }
  ModelState layout = *ModelState::Create({{"v", {static_cast<int64_t>(halves.size())}}});
  std::string payload = (*MakeCodec("fp16"))->Encode(layout, nullptr, 0);  // the header for this size
  payload.resize(13);
  payload.append(reinterpret_cast<const char*>(halves.data()), 2 * halves.size());
  Result<ModelState> decoded = (*MakeCodec("fp16"))->Decode(payload, layout);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  for (size_t i = 0; i < halves.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(decoded->data()[i]), std::bit_cast<uint32_t>(ReferenceFromHalf(halves[i])))
        << "half " << std::hex << halves[i];
  }
}

TEST(CodecTest, SplittingAcrossThreadsGivesTheSameBytesAndValues) {
  ModelState d = *ModelState::Create({{"a", {300001}}, {"b", {7}}});  // large enough to be split
  Rng rng(3);
  for (float& x : d.data()) x = static_cast<float>(rng.Normal());
  ThreadPool pool(3);
  for (const char* spec : {"f32", "fp16", "bf16", "int8", "int8:chunk=1000", "int8:chunk=1"}) {
    const auto alone = *MakeCodec(spec);
    const auto pooled = *MakeCodec(spec, &pool);
    const std::string bytes = alone->Encode(d, nullptr, 0);
    EXPECT_EQ(pooled->Encode(d, nullptr, 0), bytes) << spec;
    Result<ModelState> a = alone->Decode(bytes, d), b = pooled->Decode(bytes, d);
    ASSERT_TRUE(a.ok() && b.ok()) << spec;
    EXPECT_EQ(a->ContentSha256(), b->ContentSha256()) << spec;
  }
}

TEST(CodecTest, Int8ErrsByAtMostHalfAStepOfItsChunk) {
  const ModelState d = RandomDelta(2);
  const ModelState q = RoundTrip("int8:chunk=64", d);
  for (size_t begin = 0; begin < d.num_params(); begin += 64) {
    float absmax = 0;
    const size_t end = std::min(d.num_params(), begin + 64);
    for (size_t i = begin; i < end; ++i) absmax = std::max(absmax, std::abs(d.data()[i]));
    for (size_t i = begin; i < end; ++i) {
      EXPECT_LE(std::abs(q.data()[i] - d.data()[i]), absmax / 254 * 1.0001f + 1e-9f) << i;
    }
  }
  // About a quarter of float32's bytes.
  EXPECT_LT(MakeCodec("int8").value()->EncodedSize(d), d.num_bytes() / 4 + 64);
}

// The vectorized quantizer gives the bytes of the plain one (lrintf of v / scale, clamped to
// +-127) for chunks of every magnitude, subnormal ones included (whose coarse scale needs the
// clamp the normal ones skip, and whose inverse would overflow: such chunks once came out with
// the wrong sign).
TEST(CodecTest, Int8MatchesThePlainQuantizerByteForByte) {
  constexpr size_t kChunk = 16;
  ModelState d = *ModelState::Create({{"a", {kChunk * 56}}});
  Rng rng(9);
  for (size_t k = 0; k < 56; ++k) {
    const float magnitude = std::ldexp(1.0f, static_cast<int>(k) * 5 - 150);  // 2^-150 .. 2^125, finite
    for (size_t i = 0; i < kChunk; ++i) {
      d.data()[k * kChunk + i] = static_cast<float>(rng.Normal()) * magnitude;
    }
  }
  const std::string bytes = MakeCodec("int8:chunk=16").value()->Encode(d, nullptr, 0);
  for (size_t k = 0; k < 56; ++k) {
    const size_t at = 13 + 4 + k * (4 + kChunk);
    float scale;
    std::memcpy(&scale, bytes.data() + at, 4);
    float absmax = 0;
    for (size_t i = 0; i < kChunk; ++i) absmax = std::max(absmax, std::abs(d.data()[k * kChunk + i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(scale), std::bit_cast<uint32_t>(absmax / 127.0f)) << k;
    for (size_t i = 0; i < kChunk; ++i) {
      // Normal scales multiply by the inverse; subnormal ones divide (the inverse may overflow).
      const float v = d.data()[k * kChunk + i];
      const float x = scale >= std::numeric_limits<float>::min() ? v * (1.0f / scale) : v / scale;
      const long plain = scale == 0 ? 0 : std::clamp(std::lrintf(x), -127L, 127L);
      EXPECT_EQ(static_cast<int8_t>(bytes[at + 4 + i]), plain) << "chunk " << k << " value " << i;
    }
  }
}

TEST(CodecTest, TopKSendsTheLargestAndKeepsTheRestForLater) {
  const ModelState d = RandomDelta(3);
  ModelState residual = ModelState::ZerosLike(d);
  residual.data()[7] = 5.0f;  // left over from the last task: now the largest
  const ModelState before = residual;
  const ModelState sent = RoundTrip("topk:ratio=0.01", d, &residual);
  size_t nonzero = 0;
  for (size_t i = 0; i < d.num_params(); ++i) {
    nonzero += sent.data()[i] != 0.0f;
    // Nothing lost: what was sent plus what stays is the delta plus what was waiting.
    EXPECT_EQ(sent.data()[i] + residual.data()[i], d.data()[i] + before.data()[i]) << i;
  }
  EXPECT_EQ(nonzero, 11u);  // ceil(0.01 x 1037)
  EXPECT_EQ(sent.data()[7], 5.0f + d.data()[7]);
  EXPECT_EQ(sent.data()[5], 3.0f);
  EXPECT_EQ(residual.data()[5], 0.0f);
}

// top-k's selection against its definition: sort the indices by (magnitude descending, index
// ascending), take the first k, send them in index order. Values from a small set, both signs,
// so that most magnitudes tie (zeros of both signs, subnormals, infinity among them), and values
// from a continuous distribution; k from 1 to every value.
TEST(CodecTest, TopKTakesTheLargestMagnitudesWithTiesToTheLowerIndex) {
  const float grid[] = {0.0f, 1e-40f, 0.25f, 1.0f, 3.0f, std::numeric_limits<float>::infinity()};
  for (const size_t n : {size_t{1037}, size_t{100'003}}) {
    for (const bool ties : {true, false}) {
      ModelState d = *ModelState::Create({{"w", {static_cast<int64_t>(n)}}});
      Rng rng(n + ties);
      for (float& x : d.data()) {
        const float sign = rng.Uniform() < 0.5 ? -1.0f : 1.0f;
        x = ties ? sign * grid[static_cast<size_t>(rng.Uniform() * 5.9)] : static_cast<float>(rng.Normal());
      }
      for (const char* ratio_text : {"0.000001", "0.01", "0.3", "1"}) {
        const double ratio = std::stod(ratio_text);
        const size_t k = std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio * static_cast<double>(n))), 1, n);
        std::vector<uint32_t> want(n);
        for (uint32_t i = 0; i < n; ++i) want[i] = i;
        std::sort(want.begin(), want.end(), [&](uint32_t a, uint32_t b) {
          const float x = std::abs(d.data()[a]), y = std::abs(d.data()[b]);
          return x != y ? x > y : a < b;
        });
        want.resize(k);
        std::sort(want.begin(), want.end());
        ModelState residual = ModelState::ZerosLike(d);  // the values sent are d + 0: -0 goes as +0
        const std::string bytes = MakeCodec(std::string("topk:ratio=") + ratio_text).value()->Encode(d, &residual, 0);
        ASSERT_EQ(bytes.size(), 21 + 8 * k) << n << " " << ratio;
        size_t wrong = 0;
        for (size_t j = 0; j < k; ++j) {
          uint32_t index;
          float value;
          std::memcpy(&index, bytes.data() + 21 + 8 * j, 4);
          std::memcpy(&value, bytes.data() + 25 + 8 * j, 4);
          wrong +=
              index != want[j] || std::bit_cast<uint32_t>(value) != std::bit_cast<uint32_t>(d.data()[want[j]] + 0.0f);
        }
        EXPECT_EQ(wrong, 0u) << "n " << n << ", ties " << ties << ", ratio " << ratio;
        for (uint32_t i : want) residual.data()[i] += d.data()[i];  // sent + kept = the delta
        size_t lost = 0;
        for (size_t i = 0; i < n; ++i) lost += residual.data()[i] != d.data()[i];  // -0 == +0
        EXPECT_EQ(lost, 0u) << "n " << n << ", ties " << ties << ", ratio " << ratio;
      }
    }
  }
}

// TernGrad's and QSGD's bytes, and their decoded values, against their definitions written plainly (the encoders gather
// codes in registers, write in place and take the largest magnitude and floor without calls):
// tensors of odd sizes, so that a byte of TernGrad's codes spans two tensors, and a tensor of zeros
// (for which TernGrad draws no random numbers and QSGD draws them all), for several seeds.
TEST(CodecTest, TernGradAndQsgdBytesFollowTheirDefinitions) {
  ModelState d = *ModelState::Create({{"a", {7, 11}}, {"zeros", {5}}, {"b", {1001}}, {"c", {3}}});
  Rng values(9);
  for (size_t i = 0; i < d.num_params(); ++i) {
    const bool zero = i >= 77 && i < 82;
    d.data()[i] = zero ? 0.0f : static_cast<float>(values.Normal() * (i % 17 == 0 ? 10.0 : 0.1));
  }
  d.data()[90] = -0.0f;
  for (const uint64_t seed : {uint64_t{1}, uint64_t{2}, uint64_t{77}}) {
    std::string tern = MakeCodec("terngrad").value()->Encode(d, nullptr, 0).substr(0, 13);
    std::string qsgd = MakeCodec("qsgd:levels=5").value()->Encode(d, nullptr, 0).substr(0, 13);
    qsgd.push_back(static_cast<char>(5));
    Rng rt(seed), rq(seed);
    std::vector<uint8_t> codes((d.num_params() + 3) / 4, 0);
    std::string levels;
    size_t pos = 0;
    for (size_t t = 0; t < d.tensors().size(); ++t) {
      std::span<const float> v = d.tensor(t);
      float s = 0.0f;
      for (float x : v) s = std::max(s, std::abs(x));
      tern.append(reinterpret_cast<const char*>(&s), 4);
      double sq = 0.0;
      for (float x : v) sq += static_cast<double>(x) * x;
      const auto norm = static_cast<float>(std::sqrt(sq));
      qsgd.append(reinterpret_cast<const char*>(&norm), 4);
      for (float x : v) {
        const bool keep = s > 0 && rt.Uniform() < std::abs(x) / s;
        const uint8_t code = !keep ? 0 : (x > 0 ? 1 : 2);
        codes[pos / 4] |= static_cast<uint8_t>(code << (2 * (pos % 4)));
        ++pos;
        const double r = norm > 0 ? std::abs(x) / norm * 5 : 0.0;
        auto level = static_cast<uint32_t>(std::floor(r));
        if (rq.Uniform() < r - std::floor(r)) ++level;
        level = std::min<uint32_t>(level, 5);
        levels.push_back(static_cast<char>((x < 0 ? 0x80u : 0u) | level));
      }
    }
    tern.append(reinterpret_cast<const char*>(codes.data()), codes.size());
    qsgd += levels;
    EXPECT_TRUE(MakeCodec("terngrad").value()->Encode(d, nullptr, seed) == tern) << "seed " << seed;
    EXPECT_TRUE(MakeCodec("qsgd:levels=5").value()->Encode(d, nullptr, seed) == qsgd) << "seed " << seed;
    // And QSGD's decoder: every value sign x norm x level / levels, rounded in that order.
    Result<ModelState> back = MakeCodec("qsgd:levels=5").value()->Decode(qsgd, d);
    ASSERT_OK(back.status());
    size_t wrong = 0;
    for (size_t t = 0, at = 13 + 1 + 4 * d.tensors().size(); t < d.tensors().size(); ++t) {
      float norm;
      std::memcpy(&norm, qsgd.data() + 13 + 1 + 4 * t, 4);
      for (float x : back->tensor(t)) {
        const auto byte = static_cast<uint8_t>(qsgd[at++]);
        const float want = (byte & 0x80u ? -1.0f : 1.0f) * norm * static_cast<float>(byte & 0x7fu) / 5.0f;
        wrong += std::bit_cast<uint32_t>(x) != std::bit_cast<uint32_t>(want);
      }
    }
    EXPECT_EQ(wrong, 0u) << "seed " << seed;
    // TernGrad's: 0, the scale or minus it, per 2-bit code.
    Result<ModelState> ternary = MakeCodec("terngrad").value()->Decode(tern, d);
    ASSERT_OK(ternary.status());
    size_t wrong_ternary = 0;
    for (size_t t = 0, pos = 0; t < d.tensors().size(); ++t) {
      float scale;
      std::memcpy(&scale, tern.data() + 13 + 4 * t, 4);
      for (float x : ternary->tensor(t)) {
        const unsigned code =
            (static_cast<uint8_t>(tern[13 + 4 * d.tensors().size() + pos / 4]) >> (2 * (pos % 4))) & 3u;
        ++pos;
        const float want = code == 0 ? 0.0f : code == 1 ? scale : -scale;
        wrong_ternary += std::bit_cast<uint32_t>(x) != std::bit_cast<uint32_t>(want);
      }
    }
    EXPECT_EQ(wrong_ternary, 0u) << "seed " << seed;
  }
}

TEST(CodecTest, StochasticCodecsAreOnTheirGridAndUnbiased) {
  const ModelState d = RandomDelta(4);
  std::vector<double> tern(d.num_params(), 0.0), qsgd(d.num_params(), 0.0);
  const int draws = 400;
  for (int s = 0; s < draws; ++s) {
    const ModelState t = RoundTrip("terngrad", d, nullptr, s), q = RoundTrip("qsgd:levels=8", d, nullptr, s);
    for (size_t i = 0; i < d.num_params(); ++i) {
      const float scale = i < 1000 ? 3.0f : 2.0f;  // max |v| per tensor
      EXPECT_TRUE(t.data()[i] == 0.0f || std::abs(t.data()[i]) == scale) << i;
      tern[i] += t.data()[i];
      qsgd[i] += q.data()[i];
    }
  }
  // E[decode] = x: the sum over all values of the mean error is near 0, far below the scale.
  double tern_bias = 0, qsgd_bias = 0;
  for (size_t i = 0; i < d.num_params(); ++i) {
    tern_bias += tern[i] / draws - d.data()[i];
    qsgd_bias += qsgd[i] / draws - d.data()[i];
  }
  EXPECT_LT(std::abs(tern_bias) / static_cast<double>(d.num_params()), 0.01);
  EXPECT_LT(std::abs(qsgd_bias) / static_cast<double>(d.num_params()), 0.01);
  // The same seed encodes the same bytes.
  auto codec = *MakeCodec("terngrad");
  EXPECT_EQ(codec->Encode(d, nullptr, 9), codec->Encode(d, nullptr, 9));
}

TEST(CodecTest, BadPayloadsAreRefusedNamingTheProblem) {
  const ModelState d = RandomDelta(5);
  const ModelState other = *ModelState::Create({{"a", {3}}});
  auto check = [&](const std::string& spec, std::string bytes, const std::string& message, const ModelState& layout) {
    EXPECT_THAT(MakeCodec(spec).value()->Decode(bytes, layout).status(),
                StatusIs(StatusCode::kInvalidArgument, message))
        << spec;
  };
  const std::string int8 = MakeCodec("int8:chunk=100").value()->Encode(d, nullptr, 0);
  check("int8", int8.substr(0, int8.size() - 1), "bytes where", d);
  check("int8", "junk", "not a plexus compressed payload", d);
  check("fp16", int8, "encoded with codec 3", d);
  check("int8", int8, "holds 1037 values", other);
  std::string nan_scale = int8;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale.data() + 13 + 4, &nan, 4);
  check("int8", nan_scale, "int8 scale", d);
  std::string topk = MakeCodec("topk:ratio=0.01").value()->Encode(d, nullptr, 0);
  std::string swapped = topk;  // the first two (index, value) pairs in the wrong order
  std::memcpy(swapped.data() + 21, topk.data() + 29, 8);
  std::memcpy(swapped.data() + 29, topk.data() + 21, 8);
  check("topk", swapped, "out of range or out of order", d);
  std::string far = topk;
  const uint32_t beyond = 5000;
  std::memcpy(far.data() + 21, &beyond, 4);
  check("topk", far, "out of range", d);
  std::string tern = MakeCodec("terngrad").value()->Encode(d, nullptr, 0);
  tern.back() = static_cast<char>(0xff);
  check("terngrad", tern, "terngrad code 3", d);
  std::string q = MakeCodec("qsgd:levels=4").value()->Encode(d, nullptr, 0);
  q.back() = 0x7f;
  check("qsgd", q, "qsgd level 127 above 4", d);
  std::string f32 = MakeCodec("f32").value()->Encode(d, nullptr, 0);
  std::memcpy(f32.data() + 13, &nan, 4);
  EXPECT_FALSE(MakeCodec("f32").value()->Decode(f32, d).ok());
  // A scale so large that 127 steps of it overflow is refused before any value is written.
  std::string huge_scale = int8;
  const float huge = std::numeric_limits<float>::max();
  std::memcpy(huge_scale.data() + 13 + 4, &huge, 4);
  check("int8", huge_scale, "int8 scale", d);
  // Half floats whose exponent is all ones (an infinity, a NaN), anywhere: the decoding loops
  // see them, also when the values are split across threads.
  ThreadPool pool(2);
  ModelState big = *ModelState::Create({{"a", {300001}}});  // large enough to be split
  Rng rng(6);
  for (float& x : big.data()) x = static_cast<float>(rng.Normal());
  for (const auto& [spec, bits] : {std::pair{"fp16", uint16_t{0x7c00}}, std::pair{"bf16", uint16_t{0x7fc0}}}) {
    for (size_t at : {size_t{0}, big.num_params() - 1}) {
      std::string half = MakeCodec(spec).value()->Encode(big, nullptr, 0);
      std::memcpy(half.data() + 13 + 2 * at, &bits, 2);
      EXPECT_THAT(MakeCodec(spec, &pool).value()->Decode(half, big).status(),
                  StatusIs(StatusCode::kInvalidArgument, "compressed update"))
          << spec << " " << at;
    }
  }
  std::string f32_big = MakeCodec("f32").value()->Encode(big, nullptr, 0);
  const float inf = std::numeric_limits<float>::infinity();
  std::memcpy(f32_big.data() + 13 + 4 * (big.num_params() - 1), &inf, 4);
  EXPECT_THAT(MakeCodec("f32", &pool).value()->Decode(f32_big, big).status(),
              StatusIs(StatusCode::kInvalidArgument, "compressed update"));
}

TEST(CodecTest, SpecsAreCheckedNamingTheFlag) {
  for (const char* bad : {"zip", "int8:chunk=0", "topk:ratio=2", "qsgd:levels=200", "fp16:x=1"}) {
    Result<std::unique_ptr<Codec>> c = MakeCodec(bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().message().rfind("--codec: ", 0), 0u) << c.status().message();
  }
}

// decode(encode(x)) stays within each codec's bound for any finite input.
RC_GTEST_PROP(CodecProperty, RoundTripsStayWithinTheirBounds, ()) {
  const auto values = *rc::gen::nonEmpty(rc::gen::container<std::vector<int>>(rc::gen::inRange(-100000, 100000)));
  ModelState d = *ModelState::Create({{"w", {static_cast<int64_t>(values.size())}}});
  float absmax = 0;
  for (size_t i = 0; i < values.size(); ++i) {
    d.data()[i] = static_cast<float>(values[i]) / 1000.0f;
    absmax = std::max(absmax, std::abs(d.data()[i]));
  }
  for (const char* spec : {"fp16", "int8:chunk=1000000"}) {
    auto codec = *MakeCodec(spec);
    const std::string bytes = codec->Encode(d, nullptr, 0);
    RC_ASSERT(bytes.size() == codec->EncodedSize(d));
    Result<ModelState> out = codec->Decode(bytes, d);
    RC_ASSERT(out.ok());
    for (size_t i = 0; i < values.size(); ++i) {
      const float err = std::abs(out->data()[i] - d.data()[i]);
      if (std::string(spec) == "fp16") {
        RC_ASSERT(err <= std::abs(d.data()[i]) * 0x1p-11f + 0x1p-25f);
      } else {
        RC_ASSERT(err <= absmax / 254 * 1.0001f + 1e-9f);
      }
    }
  }
}

}  // namespace
}  // namespace plexus
