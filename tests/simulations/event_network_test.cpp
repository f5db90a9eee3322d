#include "simulations/event_network.h"

#include <string>

#include <gtest/gtest.h>

namespace plexus {
namespace {

TEST(EventNetworkTest, TimersRunInTimeOrderAndTiesInScheduleOrder) {
  EventNetwork net;
  std::string order;
  net.After(20, [&] { order += "c"; });
  net.After(10, [&] { order += "a"; });
  net.After(10, [&] {
    order += "b";
    net.After(0, [&] { order += "b2"; });  // due now: after what was already due now
  });
  net.After(10, [&] { order += "B"; });
  EXPECT_EQ(net.Run(), 5);
  EXPECT_EQ(order, "abBb2c");
  EXPECT_DOUBLE_EQ(net.now_ms(), 20);
}

TEST(EventNetworkTest, AMessageTakesUplinkLatenciesAndDownlink) {
  EventNetwork net;
  const auto a = net.AddNode({.latency_ms = 10, .up_mbps = 8, .down_mbps = 0});
  const auto b = net.AddNode({.latency_ms = 20, .up_mbps = 0, .down_mbps = 80});
  double arrived = -1;
  ASSERT_TRUE(net.Send(a, b, 1'000'000, [&] { arrived = net.now_ms(); }));
  net.Run();
  // 1 MB: 1000 ms up at 8 Mbit/s, 10 + 20 ms latency, 100 ms down at 80 Mbit/s.
  EXPECT_DOUBLE_EQ(arrived, 1130);
  EXPECT_EQ(net.messages_delivered(), 1);
  EXPECT_EQ(net.bytes_delivered(), 1'000'000u);
}

TEST(EventNetworkTest, MessagesOnOneLinkQueueBehindEachOther) {
  EventNetwork net;
  const auto a = net.AddNode({.latency_ms = 5, .up_mbps = 8});
  const auto b = net.AddNode({});
  const auto c = net.AddNode({});
  std::vector<double> at;
  net.Send(a, b, 1'000'000, [&] { at.push_back(net.now_ms()); });
  net.Send(a, c, 1'000'000, [&] { at.push_back(net.now_ms()); });  // waits for the first to leave
  net.Send(b, c, 10, [&] { at.push_back(net.now_ms()); });         // another uplink: not held up
  net.Run();
  ASSERT_EQ(at.size(), 3u);
  EXPECT_DOUBLE_EQ(at[0], 0);  // b -> c: unlimited links, no latency
  EXPECT_DOUBLE_EQ(at[1], 1005);
  EXPECT_DOUBLE_EQ(at[2], 2005);
}

TEST(EventNetworkTest, AControlMessageGoesAheadOfTheBulkQueuedOnItsLinks) {
  EventNetwork net;
  const auto a = net.AddNode({.latency_ms = 5, .up_mbps = 8});
  const auto b = net.AddNode({.latency_ms = 5, .down_mbps = 8});
  std::vector<double> at;
  net.Send(a, b, 1'000'000, [&] { at.push_back(net.now_ms()); });     // 1000 ms up, 10 latency, 1000 down
  net.SendControl(a, b, 1'000, [&] { at.push_back(net.now_ms()); });  // 1 ms up, 10 latency, 1 ms down
  net.Send(a, b, 1'000, [&] { at.push_back(net.now_ms()); });         // bulk: behind the first
  net.Run();
  ASSERT_EQ(at.size(), 3u);
  EXPECT_DOUBLE_EQ(at[0], 12);    // the control message
  EXPECT_DOUBLE_EQ(at[1], 2010);  // the first bulk message
  EXPECT_DOUBLE_EQ(at[2], 2011);  // the second: reserved behind the first on both links
  net.Partition({0, 1});
  EXPECT_FALSE(net.SendControl(a, b, 10, [] {}));
  EXPECT_EQ(net.messages_lost(), 1);
}

TEST(EventNetworkTest, APartitionLosesMessagesBetweenGroupsUntilHealed) {
  EventNetwork net;
  for (int i = 0; i < 4; ++i) net.AddNode({.latency_ms = 1});
  net.Partition({0, 0, 1, 1});
  int delivered = 0;
  EXPECT_TRUE(net.Send(0, 1, 100, [&] { ++delivered; }));
  EXPECT_FALSE(net.Send(1, 2, 100, [&] { ++delivered; }));
  net.Heal();
  EXPECT_TRUE(net.Send(1, 2, 100, [&] { ++delivered; }));
  net.Run();
  EXPECT_EQ(delivered, 2);
  EXPECT_EQ(net.messages_lost(), 1);
}

TEST(EventNetworkTest, RunStopsAtItsHorizonOrWhenAHandlerStopsIt) {
  EventNetwork net;
  int ticks = 0;
  std::function<void()> tick = [&] {
    ++ticks;
    if (ticks == 50) net.Stop();
    net.After(100, tick);
  };
  net.After(0, tick);
  EXPECT_EQ(net.Run(1000), 11);  // at 0, 100, ..., 1000
  EXPECT_DOUBLE_EQ(net.now_ms(), 1000);
  net.Run();
  EXPECT_EQ(ticks, 50);
}

}  // namespace
}  // namespace plexus
