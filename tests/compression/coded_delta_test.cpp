// Coded deltas (int8, top-k, fp16 and bf16 kept as their bytes): they read what Decode reads, refuse what it
// refuses, give Decode's values when materialized or added into a sum over any ranges, and the
// averaging family folds them into the same model as their decoded deltas.
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "aggregators/registry.h"
#include "compression/codec.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// Two tensors of 1000 and 37 values (chunks of 100 straddle them).
ModelState RandomDelta(uint64_t seed, double scale = 0.01) {
  ModelState m = *ModelState::Create({{"a", {10, 100}}, {"b", {37}}});
  Rng rng(seed);
  for (float& x : m.data()) x = static_cast<float>(rng.Normal() * scale);
  return m;
}

constexpr const char* kCodedSpecs[] = {"int8:chunk=100", "topk:ratio=0.05", "fp16", "bf16"};

TEST(CodedDeltaTest, ReadsWhatDecodeReadsAndAddsItsValuesOverAnyRanges) {
  const ModelState d = RandomDelta(1);
  for (const char* spec : kCodedSpecs) {
    SCOPED_TRACE(spec);
    auto codec = *MakeCodec(spec);
    ASSERT_TRUE(codec->has_coded_form());
    const std::string bytes = codec->Encode(d, nullptr, 0);
    const ModelState decoded = *codec->Decode(bytes, d);
    Result<std::shared_ptr<const CodedDelta>> read = codec->Read(bytes, d);
    ASSERT_OK(read.status());
    const CodedDelta& coded = **read;
    EXPECT_EQ(coded.codec(), spec);
    EXPECT_EQ(coded.bytes(), bytes);
    ASSERT_EQ(coded.num_values(), d.num_params());
    const ModelState materialized = coded.Materialize(d);
    EXPECT_EQ(materialized.ContentSha256(), decoded.ContentSha256());
    // Stored in ranges that cut chunks and tensors anywhere, then added again with another weight.
    const size_t n = d.num_params();
    std::vector<double> sum(n, std::numeric_limits<double>::quiet_NaN());
    const size_t cuts[] = {0, 1, 99, 250, 1000, 1001, n};
    for (size_t c = 0; c + 1 < std::size(cuts); ++c) coded.AddScaledTo(sum.data(), cuts[c], cuts[c + 1], 2.5, true);
    for (size_t c = 0; c + 1 < std::size(cuts); ++c) coded.AddScaledTo(sum.data(), cuts[c], cuts[c + 1], -0.5, false);
    double squares = 0.0;
    for (size_t i = 0; i < n; ++i) {
      const double v = decoded.data()[i];
      ASSERT_DOUBLE_EQ(sum[i], 2.5 * v + -0.5 * v) << i;
      squares += v * v;
    }
    EXPECT_NEAR(coded.SquaredNorm(), squares, 1e-6 * squares);
  }
}

TEST(CodedDeltaTest, ReadRefusesWhatDecodeRefuses) {
  const ModelState d = RandomDelta(2);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  auto refused = [&](const std::string& spec, const std::string& bytes, const ModelState& layout,
                     const std::string& message) {
    auto codec = *MakeCodec(spec);
    EXPECT_THAT(codec->Decode(bytes, layout).status(), StatusIs(StatusCode::kInvalidArgument, message)) << spec;
    EXPECT_THAT(codec->Read(bytes, layout).status(), StatusIs(StatusCode::kInvalidArgument, message)) << spec;
  };
  const std::string int8 = (*MakeCodec("int8:chunk=100"))->Encode(d, nullptr, 0);
  refused("int8", int8.substr(0, int8.size() - 1), d, "bytes where");
  refused("int8", int8, *ModelState::Create({{"a", {3}}}), "holds 1037 values");
  std::string nan_scale = int8;
  std::memcpy(nan_scale.data() + 13 + 4, &nan, 4);
  refused("int8", nan_scale, d, "int8 scale");
  const std::string topk = (*MakeCodec("topk:ratio=0.01"))->Encode(d, nullptr, 0);
  std::string swapped = topk;  // the first two (index, value) pairs in the wrong order
  std::memcpy(swapped.data() + 21, topk.data() + 29, 8);
  std::memcpy(swapped.data() + 29, topk.data() + 21, 8);
  refused("topk", swapped, d, "out of range or out of order");
  std::string nan_value = topk;
  std::memcpy(nan_value.data() + 25, &nan, 4);
  refused("topk", nan_value, d, "not finite");
  for (const auto& [spec, bits] : {std::pair{"fp16", uint16_t{0x7c00}}, std::pair{"fp16", uint16_t{0xfe00}},
                                   std::pair{"bf16", uint16_t{0x7fc0}}, std::pair{"bf16", uint16_t{0xff80}}}) {
    std::string half = (*MakeCodec(spec))->Encode(d, nullptr, 0);
    std::memcpy(half.data() + 13 + 2 * 1036, &bits, 2);  // the last value: an infinity or a NaN
    refused(spec, half, d, "compressed update");
  }
  // Codecs without a coded form say so.
  for (const char* spec : {"f32", "terngrad", "qsgd"}) {
    auto codec = *MakeCodec(spec);
    EXPECT_FALSE(codec->has_coded_form()) << spec;
    EXPECT_THAT(codec->Read(codec->Encode(d, nullptr, 1), d).status(),
                StatusIs(StatusCode::kFailedPrecondition, "no coded form"))
        << spec;
  }
}

TEST(CodedDeltaTest, TheStoresReaderReadsAnyCodecSpecBack) {
  const ModelState d = RandomDelta(3);
  CodedDeltaReader reader = MakeCodedDeltaReader(ModelState::ZerosLike(d));
  for (const char* spec : kCodedSpecs) {
    const std::string bytes = (*MakeCodec(spec))->Encode(d, nullptr, 0);
    Result<std::shared_ptr<const CodedDelta>> read = reader(spec, bytes);
    ASSERT_OK(read.status());
    EXPECT_EQ((*read)->bytes(), bytes);
  }
  EXPECT_THAT(reader("zip", "x").status(), StatusIs(StatusCode::kInvalidArgument, "unknown codec"));
  EXPECT_THAT(reader("int8", "junk").status(), StatusIs(StatusCode::kInvalidArgument, "compressed update"));
}

// Updates of `n` clients in `spec`: each once decoded (float32) and once coded.
struct TwoForms {
  std::vector<Update> decoded, coded;
};
TwoForms Updates(const std::string& spec, size_t n, uint64_t seed) {
  auto codec = *MakeCodec(spec);
  TwoForms out;
  for (size_t i = 0; i < n; ++i) {
    const ModelState d = RandomDelta(seed + i, 0.01 * static_cast<double>(i + 1));
    const std::string bytes = codec->Encode(d, nullptr, i);
    Update u;
    u.client_id = "c" + std::to_string(i);
    u.num_examples = static_cast<int64_t>(10 + 7 * i);
    u.local_steps = static_cast<int64_t>(1 + i);
    u.delta = *codec->Decode(bytes, d);
    out.decoded.push_back(u);
    u.delta = ModelState();
    u.coded = *codec->Read(bytes, d);
    out.coded.push_back(std::move(u));
  }
  return out;
}

std::vector<const Update*> Pointers(const std::vector<Update>& updates) {
  std::vector<const Update*> out;
  for (const Update& u : updates) out.push_back(&u);
  return out;
}

// The averaging family folds coded updates into the model their decoded deltas give: one by one,
// in a batch, with clipping, and with a pool splitting the sum. (The sums are of the same doubles
// in the same order; the tolerance only allows a fused multiply-add where a target contracts one.)
TEST(CodedDeltaTest, TheAveragingFamilyFoldsCodesIntoTheModelTheDecodedDeltasGive) {
  ThreadPool pool(2);
  ModelState base = RandomDelta(99, 1.0);
  base.set_version(4);
  for (const char* strategy : {"fedavg", "fedavg:weighted=false", "fednova", "fedadam", "norm_bound:max=0.05"}) {
    for (const char* spec : kCodedSpecs) {
      SCOPED_TRACE(std::string(strategy) + " " + spec);
      const TwoForms updates = Updates(spec, 5, 7);
      auto plain = *MakeAggregator(strategy, &pool);
      auto from_codes = *MakeAggregator(strategy, &pool);
      auto one_at_a_time = *MakeAggregator(strategy, &pool);  // fresh: FedAdam's step has state
      ASSERT_TRUE(from_codes->folds_coded());
      const ModelState want = *plain->Aggregate(base, Pointers(updates.decoded));
      const ModelState batch = *from_codes->Aggregate(base, Pointers(updates.coded));
      ASSERT_OK(one_at_a_time->Begin(base));
      for (const Update& u : updates.coded) ASSERT_OK(one_at_a_time->Fold(u));
      const ModelState one_by_one = *one_at_a_time->Finalize();
      ASSERT_EQ(batch.version(), 5u);
      for (size_t i = 0; i < base.num_params(); ++i) {
        const float tolerance = 1e-6f * (1.0f + std::abs(want.data()[i]));
        ASSERT_NEAR(batch.data()[i], want.data()[i], tolerance) << i;
        ASSERT_NEAR(one_by_one.data()[i], want.data()[i], tolerance) << i;
      }
    }
  }
}

TEST(CodedDeltaTest, StrategiesThatDoNotFoldCodesRefuseThemAndStayUnchanged) {
  const ModelState base = RandomDelta(5, 1.0);
  const TwoForms updates = Updates("int8", 3, 1);
  for (const char* strategy : {"median", "krum:f=0", "trimmed_mean:beta=0.1"}) {
    auto agg = *MakeAggregator(strategy, nullptr);
    EXPECT_FALSE(agg->folds_coded()) << strategy;
    ASSERT_OK(agg->Begin(base));
    EXPECT_THAT(agg->Fold(updates.coded[0]), StatusIs(StatusCode::kInvalidArgument, "coded values")) << strategy;
    EXPECT_EQ(agg->num_folded(), 0u);
  }
}

// Property: for any delta, folding int8's codes with any weight sums what folding the decoded
// delta sums.
RC_GTEST_PROP(CodedDeltaProperty, Int8CodesSumTheirDecodedValues, ()) {
  const size_t n = *rc::gen::inRange<size_t>(1, 700);
  const uint32_t chunk = *rc::gen::inRange<uint32_t>(1, 300);
  const double w = *rc::gen::inRange(1, 1000) / 7.0;
  ModelState d = *ModelState::Create({{"x", {static_cast<int64_t>(n)}}});
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  for (float& x : d.data()) x = static_cast<float>(rng.Normal());
  auto codec = *MakeCodec("int8:chunk=" + std::to_string(chunk));
  const std::string bytes = codec->Encode(d, nullptr, 0);
  const ModelState decoded = *codec->Decode(bytes, d);
  auto coded = *codec->Read(bytes, d);
  std::vector<double> sum(n);
  const size_t cut = *rc::gen::inRange<size_t>(0, n + 1);
  coded->AddScaledTo(sum.data(), 0, cut, w, true);
  coded->AddScaledTo(sum.data(), cut, n, w, true);
  for (size_t i = 0; i < n; ++i) RC_ASSERT(sum[i] == w * static_cast<double>(decoded.data()[i]));
}

}  // namespace
}  // namespace plexus
