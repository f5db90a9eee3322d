// Secure aggregation's messages through their protobuf form: what goes in comes out, and what
// comes off the wire malformed is refused with a clear error.
#include "proto/secagg_wire.h"

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(SecAggWireTest, CallsAndViewsSurviveTheTrip) {
  secagg::Call chunk;
  chunk.kind = secagg::Call::Kind::kMaskedChunk;
  chunk.offset = 7;
  chunk.values = {0, 1, 0xdeadbeef, 0xffffffff};
  v1::SecAggRequest req;
  SecAggCallToProto(chunk, &req);
  Result<secagg::Call> back = SecAggCallFromProto(req);
  ASSERT_OK(back);
  EXPECT_EQ(back->kind, secagg::Call::Kind::kMaskedChunk);
  EXPECT_EQ(back->offset, 7u);
  EXPECT_EQ(back->values, chunk.values);

  secagg::Call reveal;
  reveal.kind = secagg::Call::Kind::kRevealed;
  reveal.revealed.self_seed[3] = ShamirShare{2, std::vector<uint8_t>(kShamirShareBytes, 9)};
  v1::SecAggRequest req2;
  SecAggCallToProto(reveal, &req2);
  back = SecAggCallFromProto(req2);
  ASSERT_OK(back);
  ASSERT_EQ(back->revealed.self_seed.count(3), 1u);
  EXPECT_EQ(back->revealed.self_seed.at(3).x, 2u);
  EXPECT_EQ(back->revealed.self_seed.at(3).y, std::vector<uint8_t>(kShamirShareBytes, 9));

  secagg::View view;
  view.stage = secagg::Server::Stage::kUnmask;
  view.setup = secagg::Setup{};
  view.setup->params.members = {1, 2, 3};
  view.setup->params.degree = 2;
  view.setup->member = 2;
  view.setup->clip = 0.25;
  view.setup->l2_clip = 0.5;
  view.setup->noise_std = 0.125;
  view.unmask.survivors = {1, 2};
  view.unmask.dropped = {3};
  view.retry_after_ms = 100;
  v1::SecAggReply rep;
  SecAggViewToProto(view, &rep);
  Result<secagg::View> v = SecAggViewFromProto(rep);
  ASSERT_OK(v);
  EXPECT_EQ(v->stage, secagg::Server::Stage::kUnmask);
  EXPECT_EQ(v->setup->params.members, view.setup->params.members);
  EXPECT_EQ(v->setup->member, 2u);
  EXPECT_EQ(v->setup->clip, 0.25);
  EXPECT_EQ(v->setup->l2_clip, 0.5);
  EXPECT_EQ(v->setup->noise_std, 0.125);
  EXPECT_EQ(v->unmask.dropped, std::vector<uint32_t>{3});
  EXPECT_EQ(v->retry_after_ms, 100);
}

TEST(SecAggWireTest, MalformedMessagesAreRefused) {
  v1::SecAggRequest chunk;
  chunk.mutable_masked()->set_values(std::string(10, 'x'));  // not whole uint32 values
  EXPECT_THAT(SecAggCallFromProto(chunk).status(), StatusIs(StatusCode::kInvalidArgument, "not whole uint32 values"));
  v1::SecAggRequest advert;
  advert.mutable_advert()->set_seal_key(std::string(31, 'k'));
  advert.mutable_advert()->set_mask_key(std::string(32, 'k'));
  EXPECT_THAT(SecAggCallFromProto(advert).status(), StatusIs(StatusCode::kInvalidArgument, "31 bytes, not 32"));
  v1::SecAggRequest share;
  (*share.mutable_revealed()->mutable_mask_key())[4].set_y(std::string(65, 's'));
  EXPECT_THAT(SecAggCallFromProto(share).status(), StatusIs(StatusCode::kInvalidArgument, "a share of 65 bytes"));
  v1::SecAggReply stage;
  stage.set_stage(static_cast<v1::SecAggReply::Stage>(17));
  EXPECT_THAT(SecAggViewFromProto(stage).status(), StatusIs(StatusCode::kInvalidArgument, "unknown stage"));
}

}  // namespace
}  // namespace plexus
