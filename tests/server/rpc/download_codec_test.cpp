// Compressed downloads through the real gRPC service: the server's --download-codec reaches the
// training tasks of clients that advertised it, the first download is the whole model in the
// codec, later ones the change from exactly what the client rebuilt (so the codec's error does
// not pile up), and a download in another codec is refused.
#include <algorithm>
#include <cmath>

#include "compression/codec.h"
#include "core/safetensors.h"
#include "tests/server/rpc/codec_server_fixture.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

constexpr char kCodec[] = "int8:chunk=4";
constexpr size_t kChunk = 4;

// The largest error int8 may make on `values`: half a step (absmax / 127) of each chunk.
std::vector<float> Int8Bounds(std::span<const float> values) {
  std::vector<float> bound(values.size());
  for (size_t c = 0; c < values.size(); c += kChunk) {
    const size_t end = std::min(values.size(), c + kChunk);
    float absmax = 0;
    for (size_t i = c; i < end; ++i) absmax = std::max(absmax, std::abs(values[i]));
    for (size_t i = c; i < end; ++i) bound[i] = absmax / 127 / 2 * 1.0001f + 1e-7f;
  }
  return bound;
}

class DownloadCodecTest : public testing::CodecServerFixture {
 protected:
  void SetUp() override { StartWith({"tiny", 2, "", {}, kCodec}, {0.5f, -1.25f, 3.0f, 0.01f, 100.0f, -0.3f}); }

  // Downloads `version` coded for a client holding the model whose hash is `base_sha256`, and
  // rebuilds it as a client does: `base` plus the change, or the whole model from its layout.
  ModelState Rebuild(uint64_t version, const std::string& base_sha256, const ModelState* base, CodedDownload* info,
                     size_t* bytes_size = nullptr) {
    std::string bytes;
    uint64_t total = 0;
    EXPECT_OK(transport_->DownloadCoded(version, kCodec, base_sha256, &bytes, &total, info));
    if (bytes_size) *bytes_size = bytes.size();
    std::unique_ptr<Codec> codec = *MakeCodec(kCodec);
    if (info->base_sha256.empty()) {
      ModelState layout = *ModelState::Create(info->layout);
      return *codec->Decode(bytes, layout);
    }
    ModelState rebuilt = *base;
    rebuilt.Add(*codec->Decode(bytes, *base));
    return rebuilt;
  }

  // Both clients send float32 deltas for their tasks, which ends the round.
  void FinishRound(const Task& a, const Task& b, std::initializer_list<float> delta_values) {
    ModelState delta = ModelState::ZerosLike(model_);
    std::copy(delta_values.begin(), delta_values.end(), delta.data().begin());
    for (const auto& [client, task] : {std::pair{"new", a}, std::pair{"old", b}}) {
      UploadHeader h;
      h.client_id = client;
      h.task_id = task.task_id;
      h.base_version = task.model_version;
      h.num_examples = 10;
      ASSERT_OK(transport_->Upload(h, EncodeSafetensors(delta)));
    }
  }
};

TEST_F(DownloadCodecTest, OnlyClientsThatAdvertiseTheCodecAreSentIt) {
  EXPECT_EQ(task_new_.download_codec, kCodec);
  EXPECT_EQ(task_old_.download_codec, "");
}

TEST_F(DownloadCodecTest, TheWholeModelFirstThenTheChangeFromWhatTheClientRebuilt) {
  CodedDownload first;
  size_t first_bytes = 0;
  const ModelState rebuilt0 = Rebuild(task_new_.model_version, "", nullptr, &first, &first_bytes);
  // The whole model: its tensors named, every value within int8's error, the hash the server
  // gave is the one of what the client rebuilt, and a quarter-ish of float32's bytes.
  EXPECT_EQ(first.codec, kCodec);
  EXPECT_EQ(first.base_sha256, "");
  ASSERT_EQ(first.layout.size(), 2u);
  EXPECT_EQ(first.layout[0].name, "w");
  EXPECT_EQ(first.layout[1].shape, std::vector<int64_t>{2});
  EXPECT_EQ(rebuilt0.ContentSha256(), first.model_sha256);
  EXPECT_NE(first.model_sha256, model_.ContentSha256());  // lossy: not the server's model bit for bit
  const std::vector<float> bound0 = Int8Bounds(model_.data());
  for (size_t i = 0; i < bound0.size(); ++i) EXPECT_NEAR(rebuilt0.data()[i], model_.data()[i], bound0[i]) << i;
  EXPECT_LT(first_bytes * 2, EncodeSafetensors(model_).size());

  FinishRound(task_new_, task_old_, {0.001f, 0.002f, -0.003f, 0.0f, 0.5f, 0.25f});
  const Task next = transport_->Poll("new", 1000)->task;
  ASSERT_EQ(next.model_version, task_new_.model_version + 1);
  const ModelState& truth = engine_->model();

  // The next version as the change from rebuilt0: within int8's error of that change, which is
  // far smaller than the whole model's (the 100.0 in the bias no longer sets the step).
  CodedDownload second;
  const ModelState rebuilt1 = Rebuild(next.model_version, first.model_sha256, &rebuilt0, &second);
  EXPECT_EQ(second.base_sha256, first.model_sha256);
  EXPECT_TRUE(second.layout.empty());
  EXPECT_EQ(rebuilt1.ContentSha256(), second.model_sha256);
  ModelState change = truth;
  change.Subtract(rebuilt0);
  const std::vector<float> bound1 = Int8Bounds(change.data());
  for (size_t i = 0; i < bound1.size(); ++i) {
    EXPECT_NEAR(rebuilt1.data()[i], truth.data()[i], bound1[i]) << i;
    EXPECT_LE(bound1[i], bound0[i]) << i;
  }

  // Asked again, the same bytes (encoded once per version and base); a base the server never
  // sent gets the whole model.
  CodedDownload again;
  EXPECT_EQ(Rebuild(next.model_version, first.model_sha256, &rebuilt0, &again).ContentSha256(), second.model_sha256);
  CodedDownload unknown_base;
  Rebuild(next.model_version, model_.ContentSha256(), &model_, &unknown_base);
  EXPECT_EQ(unknown_base.base_sha256, "");
  EXPECT_EQ(unknown_base.layout.size(), 2u);
}

// A client that holds a published version exactly (it downloaded it in float32 for an evaluation
// task, or kept it on disk) names that version's hash: the server takes the change from its
// checkpoint instead of sending the whole model.
TEST_F(DownloadCodecTest, AClientHoldingAPublishedVersionGetsTheChangeFromItsCheckpoint) {
  FinishRound(task_new_, task_old_, {0.001f, 0.002f, -0.003f, 0.0f, 0.5f, 0.25f});
  const ModelState v1 = engine_->model();
  ASSERT_EQ(v1.version(), 1u);
  FinishRound(transport_->Poll("new", 1000)->task, transport_->Poll("old", 1000)->task,
              {0.01f, -0.02f, 0.0f, 0.03f, -0.5f, 0.125f});
  const ModelState& v2 = engine_->model();
  ASSERT_EQ(v2.version(), 2u);
  CodedDownload info;
  const ModelState rebuilt = Rebuild(2, v1.ContentSha256(), &v1, &info);
  EXPECT_EQ(info.base_sha256, v1.ContentSha256());
  EXPECT_TRUE(info.layout.empty());
  EXPECT_EQ(rebuilt.ContentSha256(), info.model_sha256);
  ModelState change = v2;
  change.Subtract(v1);
  const std::vector<float> bound = Int8Bounds(change.data());
  const std::vector<float> whole = Int8Bounds(v2.data());
  for (size_t i = 0; i < bound.size(); ++i) {
    EXPECT_NEAR(rebuilt.data()[i], v2.data()[i], bound[i]) << i;
    EXPECT_LT(bound[i], whole[i]) << i;  // the change's steps are finer than the whole model's
  }
}

TEST_F(DownloadCodecTest, ADownloadInAnotherCodecIsRefusedAndFloat32StaysOpen) {
  std::string bytes;
  uint64_t total = 0;
  CodedDownload info;
  EXPECT_THAT(transport_->DownloadCoded(task_new_.model_version, "fp16", "", &bytes, &total, &info),
              StatusIs(StatusCode::kInvalidArgument, "download codec is 'int8:chunk=4'"));
  bytes.clear();
  StringDownloadSink sink(&bytes);
  ASSERT_OK(transport_->Download(task_old_.model_version, &sink));
  EXPECT_EQ(DecodeSafetensors(bytes)->ContentSha256(), model_.ContentSha256());
}

TEST(DownloadCodecStartTest, ACodecThatDropsValuesIsRefusedForDownloads) {
  RealClock clock;
  MemoryStore store;
  SyncOptions o;
  o.rounds = 1;
  ModelState model = *ModelState::Create({{"w", {4}}});
  auto engine = *SyncEngine::Open(o, model, &store, &clock, nullptr, nullptr);
  EXPECT_THAT(
      FederationServer::Start("127.0.0.1:0", engine.get(), &store, {"tiny", 1, "", {}, "topk:ratio=0.5"}).status(),
      StatusIs(StatusCode::kInvalidArgument, "downloads take f32, fp16, bf16 or int8"));
}

}  // namespace
}  // namespace plexus
