// UploadPlaces on a manual clock, without gRPC: uploads that stall are cancelled and their
// clients become slow senders, who together may hold at most three quarters of the places, so
// that eight drips can no longer keep a ninth, honest client out.
#include "server/rpc/upload_places.h"

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "core/clock.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// A call the places may cancel; counts the cancellations.
struct CountedCall {
  explicit CountedCall(std::string peer) : call{std::move(peer), [this] { ++cancels; }} {}
  int cancels = 0;
  UploadCall call;
};

class UploadPlacesTest : public ::testing::Test {
 protected:
  UploadPlaces* Places(int max_concurrent) {
    UploadPlaces::Limits l;
    l.max_concurrent = max_concurrent;
    l.wait_ms = 1;  // a place that is not free now is refused (nothing frees one in these tests)
    l.stall_ms = 1000;
    l.min_bytes_per_s = 0;
    places_ = std::make_unique<UploadPlaces>(l, &clock_);
    return places_.get();
  }
  // Takes a place for `client` on a new call; the place and its call live in the fixture.
  const UploadPlaces::Place& Take(UploadPlaces* places, const std::string& client) {
    calls_.push_back(std::make_unique<CountedCall>(client));
    held_.push_back(std::make_unique<UploadPlaces::Place>(places, &calls_.back()->call, client));
    return *held_.back();
  }
  // Makes every client in `clients` a slow sender: each takes a place, sends nothing for the
  // stall bound, is cancelled (once), and its handler gives the place back.
  void MakeSlowSenders(UploadPlaces* places, const std::vector<std::string>& clients) {
    for (const std::string& c : clients) ASSERT_TRUE(Take(places, c).status().ok()) << c;
    clock_.AdvanceMs(1000);
    places->CancelStalled();
    places->CancelStalled();  // each stalled upload is cancelled once
    for (const auto& call : calls_) EXPECT_EQ(call->cancels, 1) << call->call.peer;
    held_.clear();
    calls_.clear();
  }

  ManualClock clock_{0};
  // Declared before the places taken from it: they give their places back first.
  std::unique_ptr<UploadPlaces> places_;
  std::vector<std::unique_ptr<CountedCall>> calls_;
  std::vector<std::unique_ptr<UploadPlaces::Place>> held_;
};

TEST_F(UploadPlacesTest, SlowSendersTogetherHoldAtMostThreeQuartersOfThePlaces) {
  UploadPlaces* places = Places(8);
  const std::vector<std::string> slow{"s1", "s2", "s3", "s4", "s5", "s6", "s7", "s8"};
  MakeSlowSenders(places, slow);
  // Back with their next uploads: six of the eight get a place, the other two are refused
  // although two places are free...
  int got = 0;
  for (const std::string& c : slow) {
    const UploadPlaces::Place& p = Take(places, c);
    if (p.status().ok()) {
      ++got;
    } else {
      EXPECT_THAT(p.status(), StatusIs(StatusCode::kResourceExhausted, "stayed busy")) << c;
    }
  }
  EXPECT_EQ(got, 6);
  // ...which stay for clients that never stalled.
  EXPECT_TRUE(Take(places, "honest1").status().ok());
  EXPECT_TRUE(Take(places, "honest2").status().ok());
  EXPECT_THAT(Take(places, "honest3").status(), StatusIs(StatusCode::kResourceExhausted, "stayed busy"));
}

TEST_F(UploadPlacesTest, AnUploadThatKeepsDeliveringIsNeverCancelled) {
  UploadPlaces* places = Places(2);
  const UploadPlaces::Place& p = Take(places, "a");
  ASSERT_TRUE(p.status().ok());
  UploadPlaces::Place& steady = *held_.back();
  for (int i = 0; i < 10; ++i) {
    clock_.AdvanceMs(900);
    steady.Progress(100);
    places->CancelStalled();
  }
  EXPECT_EQ(calls_.back()->cancels, 0);
  EXPECT_EQ(places->received_bytes(), 1000);
  // One upload at a time per client.
  EXPECT_THAT(Take(places, "a").status(), StatusIs(StatusCode::kResourceExhausted, "already has an upload"));
}

}  // namespace
}  // namespace plexus
