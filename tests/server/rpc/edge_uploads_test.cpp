// What an edge aggregator sends a root, through the real gRPC service: bundles of forwarded
// updates are taken only by a server told how large (--max-bundle-updates) and only from the
// clients named as edges (--edge-clients), and each forwarded update counts as its client's.
#include <grpcpp/grpcpp.h>

#include <string>
#include <vector>

#include "compression/codec.h"
#include "core/safetensors.h"
#include "tests/server/rpc/codec_server_fixture.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

class EdgeUploadsTest : public testing::CodecServerFixture {
 protected:
  // A bundle of updates whose first value is each of `values`, 10 examples each.
  std::string Bundle(const std::vector<float>& values) {
    std::vector<Update> in;
    for (size_t i = 0; i < values.size(); ++i) {
      Update u;
      u.client_id = "c" + std::to_string(i);
      u.task_id = "edge-task-" + std::to_string(i);
      u.num_examples = 10;
      u.local_steps = 1;
      u.delta = ModelState::ZerosLike(model_);
      u.delta.data()[0] = values[i];
      in.push_back(std::move(u));
    }
    return EncodeUpdateBundle(in, model_.num_params());
  }
  UploadHeader Header(const std::string& client, const Task& t, int64_t examples) {
    UploadHeader h;
    h.client_id = client;
    h.task_id = t.task_id;
    h.base_version = t.model_version;
    h.num_examples = examples;
    h.codec = kUpdateBundleCodec;
    return h;
  }
};

TEST_F(EdgeUploadsTest, BundlesAreTakenOnlyWhenAllowedAndFromTheNamedEdges) {
  ServerInfo info{"tiny", 1, ""};
  info.max_bundle_updates = 2;
  info.edge_clients = {"new"};
  StartWith(info);
  // Not an edge: refused, whatever it holds.
  EXPECT_THAT(transport_->Upload(Header("old", task_old_, 20), Bundle({1, 2})).status(),
              StatusIs(StatusCode::kPermissionDenied, "not one of this server's edges"));
  // Too many updates for this server.
  EXPECT_THAT(transport_->Upload(Header("new", task_new_, 30), Bundle({1, 2, 3})).status(),
              StatusIs(StatusCode::kResourceExhausted, "at most 2"));
  EXPECT_EQ(engine_->status().round_received, 0);
  // The edge's two forwarded updates, then the other client's own: FedAvg over three updates.
  ASSERT_OK(transport_->Upload(Header("new", task_new_, 20), Bundle({1, 2})));
  ModelState own = ModelState::ZerosLike(model_);
  own.data()[0] = 6;
  UploadHeader plain = Header("old", task_old_, 10);
  plain.codec = "";
  ASSERT_OK(transport_->Upload(plain, EncodeSafetensors(own)));
  ASSERT_EQ(engine_->model().version(), 1u);
  EXPECT_FLOAT_EQ(engine_->model().data()[0], (1.0f + 2.0f + 6.0f) / 3);
  EXPECT_EQ(engine_->history().back().num_updates, 3);
}

TEST_F(EdgeUploadsTest, AServerNotToldToTakeBundlesRefusesThem) {
  StartWith({"tiny", 1, ""});
  EXPECT_THAT(transport_->Upload(Header("new", task_new_, 20), Bundle({1, 2})).status(),
              StatusIs(StatusCode::kInvalidArgument, "--max-bundle-updates"));
  EXPECT_EQ(engine_->status().round_received, 0);
}

}  // namespace
}  // namespace plexus
