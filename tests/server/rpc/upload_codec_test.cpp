// Compressed uploads through the real gRPC service: the server's --upload-codec reaches the tasks
// of clients that advertised it (and only theirs), their coded updates are merged (FedAvg folds
// int8's codes as they came), and a coded update its task did not name, or a malformed one, is
// refused and changes nothing.
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "compression/codec.h"
#include "core/safetensors.h"
#include "tests/server/rpc/codec_server_fixture.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

constexpr char kCodec[] = "int8:chunk=4";

class UploadCodecTest : public testing::CodecServerFixture {
 protected:
  void SetUp() override { StartWith({"tiny", 1, kCodec}); }

  ModelState Delta(std::initializer_list<float> values) {
    ModelState d = ModelState::ZerosLike(model_);
    std::copy(values.begin(), values.end(), d.data().begin());
    return d;
  }
  std::string Int8(const ModelState& delta) { return (*MakeCodec(kCodec))->Encode(delta, nullptr, 0); }
  UploadHeader Header(const std::string& client, const Task& t, const std::string& codec) {
    UploadHeader h;
    h.client_id = client;
    h.task_id = t.task_id;
    h.base_version = t.model_version;
    h.num_examples = 10;
    h.codec = codec;
    return h;
  }
};

TEST_F(UploadCodecTest, OnlyClientsThatAdvertiseTheCodecAreAskedForIt) {
  EXPECT_EQ(task_new_.upload_codec, kCodec);
  EXPECT_EQ(task_old_.upload_codec, "");
}

TEST_F(UploadCodecTest, CodedAndFloat32UpdatesAreMergedTogether) {
  const ModelState coded = Delta({1.0f, -0.5f, 0.25f, 2.0f, 0.0f, -1.0f});
  const std::string bytes = Int8(coded);
  const std::string f32 = EncodeSafetensors(Delta({1, 1, 1, 1, 1, 1}));
  EXPECT_LT(bytes.size(), f32.size());
  ASSERT_OK(transport_->Upload(Header("new", task_new_, kCodec), bytes));
  // FedAvg folds int8's codes: the server keeps the update as the bytes that came, no float32 copy.
  ASSERT_TRUE(engine_->folds_coded());
  const std::optional<OpenRoundRecord> open = *store_.GetOpenRound();
  ASSERT_TRUE(open.has_value());
  const std::vector<Update> stored = *store_.ListAcceptedUpdates(open->round, open->attempt);
  ASSERT_EQ(stored.size(), 1u);
  ASSERT_NE(stored[0].coded, nullptr);
  EXPECT_EQ(stored[0].coded->bytes(), bytes);
  EXPECT_EQ(stored[0].coded->codec(), kCodec);
  EXPECT_EQ(stored[0].delta.num_params(), 0u);
  ASSERT_OK(transport_->Upload(Header("old", task_old_, ""), f32));
  ASSERT_TRUE(engine_->finished());
  // The mean of the two deltas, the coded one within int8's rounding (half a step of its chunk).
  const std::vector<float> expected{1.0f, 0.25f, 0.625f, 1.5f, 0.5f, 0.0f};
  for (size_t i = 0; i < expected.size(); ++i) {
    const float step = i < 4 ? 2.0f / 127 : 1.0f / 127;
    EXPECT_NEAR(engine_->model().data()[i], expected[i], step / 2 / 2 + 1e-6) << i;
  }
  // The door counts the bytes that came: the coded update's, not its float32 size.
  EXPECT_EQ(server_->metrics().upload_bytes, static_cast<int64_t>(bytes.size() + f32.size()));
}

TEST_F(UploadCodecTest, CodedUpdatesTheTaskDidNotNameOrThatDoNotDecodeAreRefusedAndChangeNothing) {
  const ModelState delta = Delta({1, 2, 3, 4, 5, 6});
  // A client whose task said float32.
  EXPECT_THAT(transport_->Upload(Header("old", task_old_, kCodec), Int8(delta)).status(),
              StatusIs(StatusCode::kInvalidArgument, "did not name"));
  // Another codec than the task's.
  EXPECT_THAT(
      transport_->Upload(Header("new", task_new_, "fp16"), (*MakeCodec("fp16"))->Encode(delta, nullptr, 0)).status(),
      StatusIs(StatusCode::kInvalidArgument, "did not name"));
  // The task's codec, but bytes cut short, or with a NaN scale.
  std::string cut = Int8(delta);
  cut.pop_back();
  EXPECT_THAT(transport_->Upload(Header("new", task_new_, kCodec), cut).status(),
              StatusIs(StatusCode::kInvalidArgument, "30 bytes where 31 were expected"));
  std::string nan_scale = Int8(delta);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::memcpy(nan_scale.data() + nan_scale.size() - 6 - 2 * 4, &nan, 4);  // the first of two chunks' scales
  EXPECT_THAT(transport_->Upload(Header("new", task_new_, kCodec), nan_scale).status(),
              StatusIs(StatusCode::kInvalidArgument, "scale"));
  EXPECT_EQ(engine_->status().round_received, 0);
  EXPECT_EQ(engine_->model().ContentSha256(), model_.ContentSha256());
  // The refusals did not spoil the task: the right update is still taken.
  ASSERT_OK(transport_->Upload(Header("new", task_new_, kCodec), Int8(delta)));
  EXPECT_EQ(engine_->status().round_received, 1);
}

// A server started without an upload codec (or with a download codec only) names none in its
// tasks; a coded upload sent to it anyway is refused, and the server keeps serving (it crashed
// with SIGSEGV, calling through the null codec before checking the task's codec).
class NoUploadCodecTest : public testing::CodecServerFixture {};

TEST_F(NoUploadCodecTest, ACodedUploadToAServerWithoutAnUploadCodecIsRefusedNotACrash) {
  ServerInfo info{"tiny", 1, ""};
  info.download_codec = "fp16";
  StartWith(info);
  EXPECT_EQ(task_new_.upload_codec, "");
  ModelState delta = ModelState::ZerosLike(model_);
  delta.data()[0] = 1;
  UploadHeader h;
  h.client_id = "new";
  h.task_id = task_new_.task_id;
  h.base_version = task_new_.model_version;
  h.num_examples = 10;
  h.codec = kCodec;
  EXPECT_THAT(transport_->Upload(h, (*MakeCodec(kCodec))->Encode(delta, nullptr, 0)).status(),
              StatusIs(StatusCode::kInvalidArgument, "did not name"));
  // Still serving: the same task's float32 update is taken.
  h.codec = "";
  ASSERT_OK(transport_->Upload(h, EncodeSafetensors(delta)));
  EXPECT_EQ(engine_->status().round_received, 1);
}

}  // namespace
}  // namespace plexus
