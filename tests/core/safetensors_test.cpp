#include "core/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>

#include "core/crc32c.h"
#include "core/model_content.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

ModelState Sample() {
  ModelState m = *ModelState::Create({{"fc2.weight", {2, 2}}, {"fc1.bias", {3}}}, 7);
  for (size_t i = 0; i < m.num_params(); ++i) m.data()[i] = 0.5f * static_cast<float>(i) - 1.0f;
  return m;
}

// A file as Python's safetensors writes it, built by hand: header length, JSON, data.
std::string HandMade(const std::string& json, const std::string& data) {
  uint64_t n = json.size();
  std::string out(reinterpret_cast<const char*>(&n), 8);
  return out + json + data;
}

TEST(SafetensorsTest, RoundTripKeepsOrderValuesAndVersion) {
  ModelState m = Sample();
  Result<ModelState> back = DecodeSafetensors(EncodeSafetensors(m));
  ASSERT_OK(back);
  EXPECT_EQ(*back, m);
  EXPECT_EQ(back->tensors()[0].name, "fc2.weight");  // not alphabetical: our order is kept
}

TEST(SafetensorsTest, ExtraMetadataIsWrittenAndIgnoredOnReading) {
  ModelState m = *ModelState::Create({{"w", {2}}});
  m.set_version(4);
  const std::string prefix = SafetensorsPrefix(m, {{"plexus.preprocess", "(x / 255 - 0.2860) / 0.3530"}});
  EXPECT_NE(prefix.find("\"plexus.preprocess\":\"(x / 255 - 0.2860) / 0.3530\""), std::string::npos);
  const std::string bytes = prefix + std::string(reinterpret_cast<const char*>(m.data().data()), m.num_bytes());
  auto back = DecodeSafetensors(bytes);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->version(), 4u);
  EXPECT_EQ(back->ContentSha256(), m.ContentSha256());
}

TEST(SafetensorsTest, APrefixAlignedToABlockDecodesLikeTheOrdinaryOne) {
  const ModelState m = Sample();
  const std::string values(reinterpret_cast<const char*>(m.data().data()), m.num_bytes());
  for (size_t alignment : {size_t{8}, size_t{64}, size_t{4096}}) {
    const std::string prefix = SafetensorsPrefixAlignedTo(m, alignment);
    EXPECT_EQ(prefix.size() % alignment, 0u) << alignment;
    EXPECT_LT(prefix.size(), SafetensorsPrefix(m).size() + alignment) << alignment;
    Result<ModelState> back = DecodeSafetensors(prefix + values);
    ASSERT_OK(back.status());
    EXPECT_EQ(*back, m);
    EXPECT_EQ(back->version(), m.version());
  }
  EXPECT_EQ(SafetensorsPrefixAlignedTo(m, 8), SafetensorsPrefix(m));
}

TEST(SafetensorsTest, ReadsAFileWithoutMetadata) {
  float v[2] = {1.5f, -2.0f};
  std::string data(reinterpret_cast<const char*>(v), sizeof v);
  Result<ModelState> m = DecodeSafetensors(HandMade(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data));
  ASSERT_OK(m);
  EXPECT_EQ(m->version(), 0u);
  EXPECT_EQ(m->data()[1], -2.0f);
}

TEST(SafetensorsTest, RefusesMalformedInput) {
  EXPECT_THAT(DecodeSafetensors("abc"), StatusIs(StatusCode::kInvalidArgument, "shorter"));
  std::string huge(8, '\xff');
  EXPECT_THAT(DecodeSafetensors(huge), StatusIs(StatusCode::kInvalidArgument, "header length"));
  EXPECT_THAT(DecodeSafetensors(HandMade("{not json", "")),
              StatusIs(StatusCode::kInvalidArgument, "not a JSON object"));
  EXPECT_THAT(DecodeSafetensors(HandMade(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd")),
              StatusIs(StatusCode::kInvalidArgument, "F32 only"));
  EXPECT_THAT(DecodeSafetensors(HandMade(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", "12345678")),
              StatusIs(StatusCode::kInvalidArgument, "8 bytes for 3"));
  EXPECT_THAT(DecodeSafetensors(HandMade(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,80]}})", "12345678")),
              StatusIs(StatusCode::kInvalidArgument, "outside"));
  EXPECT_THAT(DecodeSafetensors(HandMade(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", "12345678")),
              StatusIs(StatusCode::kInvalidArgument, "negative"));
  EXPECT_THAT(DecodeSafetensors(HandMade(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                         R"("y":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
                                         "1234")),
              StatusIs(StatusCode::kInvalidArgument, "overlaps"));
}

// A dtype nested 100,000 levels deep once overflowed the stack while the error message was written.
TEST(SafetensorsTest, RefusesDeepNestingWithoutRecursing) {
  const int depth = 100000;
  const std::string nested = std::string(depth, '[') + "\"F32\"" + std::string(depth, ']');
  const std::string json = R"({"x":{"dtype":)" + nested + R"(,"shape":[2],"data_offsets":[0,8]}})";
  EXPECT_THAT(DecodeSafetensors(HandMade(json, "12345678")), StatusIs(StatusCode::kInvalidArgument, "nests deeper"));
  EXPECT_THAT(SafetensorsLayout(json, 8), StatusIs(StatusCode::kInvalidArgument, "nests deeper"));
  // Brackets inside strings (escaped quotes included) do not count as nesting.
  const std::string names = R"({"__metadata__":{"note":"[[[[[[[[[[\"{{{{{{{{{{"},)"
                            R"("x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_OK(SafetensorsLayout(names, 8));
  // A wrong dtype is named in a short excerpt, not dumped whole.
  const std::string wide = R"({"x":{"dtype":")" + std::string(5000, 'A') + R"(","shape":[2],"data_offsets":[0,8]}})";
  const Status wide_status = SafetensorsLayout(wide, 8).status();
  EXPECT_THAT(wide_status, StatusIs(StatusCode::kInvalidArgument, "F32 only"));
  EXPECT_LT(wide_status.message().size(), 300u);
}

TEST(SafetensorsTest, EveryTruncationIsRefusedCleanly) {
  const std::string bytes = EncodeSafetensors(Sample());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(DecodeSafetensors(std::string_view(bytes).substr(0, n)).ok()) << n;
  }
}

TEST(SafetensorsStreamDecoderTest, AnySplitIntoPiecesDecodesLikeTheWhole) {
  const ModelState m = Sample();
  const std::string bytes = EncodeSafetensors(m);
  for (size_t piece = 1; piece <= bytes.size(); ++piece) {
    SafetensorsStreamDecoder d(bytes.size());
    for (size_t at = 0; at < bytes.size(); at += piece) {
      ASSERT_OK(d.Append(std::string_view(bytes).substr(at, piece)));
      EXPECT_EQ(d.ReceivedSha256(), Sha256Hex(bytes.substr(0, std::min(bytes.size(), at + piece))));
    }
    Result<ModelState> back = std::move(d).Finish();
    ASSERT_OK(back);
    EXPECT_EQ(*back, m) << piece;
    EXPECT_EQ(back->version(), 7u);
  }
}

// The CRC taken as the values land is the model's ContentCrc32c, whatever the pieces (the header
// split anywhere, values cut inside a float), and only once every byte came.
TEST(SafetensorsStreamDecoderTest, TakesTheContentCrc32cAsTheValuesArrive) {
  const ModelState m = Sample();
  const std::string bytes = EncodeSafetensors(m);
  EXPECT_EQ(ExtendCrc32c(ContentHeadCrc32c(m),
                         std::string_view(reinterpret_cast<const char*>(m.data().data()), m.num_bytes())),
            m.ContentCrc32c());
  for (size_t piece = 1; piece <= bytes.size(); ++piece) {
    SafetensorsStreamDecoder d(bytes.size(), /*content_crc32c=*/true);
    for (size_t at = 0; at < bytes.size(); at += piece) {
      EXPECT_FALSE(d.ContentCrc32c().has_value()) << piece << " " << at;
      ASSERT_OK(d.Append(std::string_view(bytes).substr(at, piece)));
    }
    EXPECT_EQ(d.ContentCrc32c(), m.ContentCrc32c()) << piece;
  }
  SafetensorsStreamDecoder without(bytes.size());
  ASSERT_OK(without.Append(bytes));
  EXPECT_FALSE(without.ContentCrc32c().has_value());
  // Another value, another CRC.
  ModelState other = m;
  other.data()[1] += 1.0f;
  SafetensorsStreamDecoder changed(bytes.size(), /*content_crc32c=*/true);
  ASSERT_OK(changed.Append(EncodeSafetensors(other)));
  EXPECT_EQ(changed.ContentCrc32c(), other.ContentCrc32c());
  EXPECT_NE(changed.ContentCrc32c(), m.ContentCrc32c());
}

TEST(SafetensorsStreamDecoderTest, RefusesWhatTheWholeDecoderRefuses) {
  const std::string bytes = EncodeSafetensors(Sample());
  SafetensorsStreamDecoder early(bytes.size());
  ASSERT_OK(early.Append(std::string_view(bytes).substr(0, 20)));
  EXPECT_THAT(std::move(early).Finish(), StatusIs(StatusCode::kInvalidArgument, "ended after 20 of"));
  SafetensorsStreamDecoder longer(bytes.size());
  EXPECT_THAT(longer.Append(bytes + "x"), StatusIs(StatusCode::kInvalidArgument, "more than its announced"));
  SafetensorsStreamDecoder huge(100);
  EXPECT_THAT(huge.Append(std::string(8, '\xff')), StatusIs(StatusCode::kInvalidArgument, "header length"));
  const std::string f16 = HandMade(R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}})", "abcd");
  SafetensorsStreamDecoder wrong(f16.size());
  EXPECT_THAT(wrong.Append(f16), StatusIs(StatusCode::kInvalidArgument, "F32 only"));
  const std::string empty_header = HandMade("", "");
  SafetensorsStreamDecoder none(empty_header.size());
  EXPECT_THAT(none.Append(empty_header), StatusIs(StatusCode::kInvalidArgument, "not a JSON object"));
}

// The stream decoder checks values as they arrive; a model it found finite skips the second
// pass, and anything that writes the values afterwards makes CheckFinite look again.
TEST(SafetensorsStreamDecoderTest, ChecksFinitenessAsValuesArriveAndForgetsItOnWrites) {
  const auto stream = [](const std::string& bytes, size_t piece) {
    SafetensorsStreamDecoder d(bytes.size());
    for (size_t at = 0; at < bytes.size(); at += piece)
      EXPECT_TRUE(d.Append(std::string_view(bytes).substr(at, piece)).ok());
    return *std::move(d).Finish();
  };
  ModelState nan_inside = Sample();
  nan_inside.data()[4] = std::numeric_limits<float>::quiet_NaN();  // fc1.bias[0]
  const std::string with_nan = EncodeSafetensors(nan_inside);
  for (size_t piece : {1, 3, 7, 4096}) {  // pieces that split the NaN's bytes, and one piece
    EXPECT_THAT(stream(with_nan, piece).CheckFinite(), StatusIs(StatusCode::kInvalidArgument, "fc1.bias")) << piece;
  }

  ModelState big = Sample();
  big.data()[0] = 3e38f;
  ModelState decoded = stream(EncodeSafetensors(big), 5);
  EXPECT_TRUE(decoded.CheckFinite().ok());
  decoded.Scale(0.5f);  // stays finite
  EXPECT_TRUE(decoded.CheckFinite().ok());
  decoded.Scale(4.0f);  // overflows: the check must look again
  EXPECT_THAT(decoded.CheckFinite(), StatusIs(StatusCode::kInvalidArgument, "fc2.weight"));

  ModelState written = stream(EncodeSafetensors(Sample()), 5);
  ASSERT_TRUE(written.CheckFinite().ok());
  written.data()[6] = std::numeric_limits<float>::infinity();
  EXPECT_THAT(written.CheckFinite(), StatusIs(StatusCode::kInvalidArgument, "fc1.bias"));
  ModelState subtracted = stream(EncodeSafetensors(big), 5);
  ModelState negative_big = Sample();
  negative_big.data()[0] = -3e38f;
  subtracted.Subtract(negative_big);  // 3e38 - (-3e38) overflows
  EXPECT_THAT(subtracted.CheckFinite(), StatusIs(StatusCode::kInvalidArgument, "fc2.weight"));
}

TEST(SafetensorsTest, FileRoundTripAndMissingFile) {
  const std::string path = (std::filesystem::temp_directory_path() / "plexus_st_test.safetensors").string();
  ASSERT_OK(WriteSafetensorsFile(path, Sample()));
  Result<ModelState> m = ReadSafetensorsFile(path);
  ASSERT_OK(m);
  EXPECT_EQ(*m, Sample());
  std::filesystem::remove(path);
  EXPECT_THAT(ReadSafetensorsFile(path), StatusIs(StatusCode::kNotFound, "cannot open"));
}

}  // namespace
}  // namespace plexus
