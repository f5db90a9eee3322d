// EventNetwork: the discrete-event core for simulating a protocol between nodes: a virtual clock
// in milliseconds, timers, and messages carried over each node's access link. A link has a
// latency and an upload and a download bandwidth (0 = unlimited); a limited link carries one
// message at a time each way, reserved in the order messages are sent, so they queue behind each
// other: a message leaves when the sender's uplink is free, takes its bytes at the uplink's rate,
// crosses both latencies, and arrives when the receiver's downlink has taken its bytes. A partition puts nodes in
// groups; a message between groups is lost. Handlers run one at a time in time order, and events due at the same moment
// in the order they were scheduled, so a run is deterministic. The CRDT gossip simulation runs on it
// (simulations/crdt_sim.h); a decentralized protocol is a set of handlers. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <queue>
#include <vector>

namespace plexus {

class EventNetwork {
 public:
  using NodeId = uint32_t;
  using Handler = std::function<void()>;
  struct AccessLink {
    double latency_ms = 0.0;  // one way, to the network core
    double up_mbps = 0.0;     // megabits per second; 0 = unlimited
    double down_mbps = 0.0;
    bool operator==(const AccessLink&) const = default;
  };

  NodeId AddNode(const AccessLink& link);
  // Room for `nodes` nodes in all: a network of ten million would otherwise grow its table by
  // doubling, to room for 16.8 million (270 MB more than it needs).
  void ReserveNodes(size_t nodes) { nodes_.reserve(nodes); }
  size_t num_nodes() const { return nodes_.size(); }
  double now_ms() const { return now_ms_; }

  // Runs `handler` `delay_ms` from now (negative delays count as 0).
  void After(double delay_ms, Handler handler);
  // Sends `bytes` from `from` to `to`; `on_delivery` runs when the last byte has arrived. Returns
  // false, and drops the message, when a partition separates the two.
  bool Send(NodeId from, NodeId to, uint64_t bytes, Handler on_delivery);
  // A small control message (a membership probe): it goes ahead of the bulk bytes queued on both
  // links, as a peer's control frames go before its model chunks, taking only the latencies and
  // its own bytes' time. It reserves nothing. Lost across a partition like any message.
  bool SendControl(NodeId from, NodeId to, uint64_t bytes, Handler on_delivery);
  // group_of[node] for every node: only nodes in the same group reach each other, until Heal().
  void Partition(std::vector<uint32_t> group_of) { group_of_ = std::move(group_of); }
  void Heal() { group_of_.clear(); }
  bool Reachable(NodeId a, NodeId b) const { return group_of_.empty() || group_of_[a] == group_of_[b]; }

  // Runs events in time order until none is left, the next is past `until_ms`, or a handler
  // called Stop(). Returns the number of events run.
  int64_t Run(double until_ms = std::numeric_limits<double>::infinity());
  void Stop() { stopped_ = true; }

  int64_t messages_delivered() const { return messages_delivered_; }
  int64_t messages_lost() const { return messages_lost_; }
  uint64_t bytes_delivered() const { return bytes_delivered_; }

 private:
  // A node names its link in links_: nodes added one after the other with the same link (a
  // population of alike devices) share one entry, so that a node costs 24 bytes, not 40 (16 MB
  // at a million clients). Nodes whose links all differ cost 24 bytes more each.
  struct Node {
    uint32_t link = 0;        // index into links_
    double up_free_ms = 0.0;  // when the uplink has sent everything queued on it
    double down_free_ms = 0.0;
  };
  struct Event {
    double at_ms;
    uint64_t seq;
    Handler handler;
    bool operator>(const Event& o) const { return at_ms != o.at_ms ? at_ms > o.at_ms : seq > o.seq; }
  };

  std::vector<Node> nodes_;
  std::vector<AccessLink> links_;
  std::vector<uint32_t> group_of_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  double now_ms_ = 0.0;
  uint64_t seq_ = 0;
  bool stopped_ = false;
  int64_t messages_delivered_ = 0, messages_lost_ = 0;
  uint64_t bytes_delivered_ = 0;
};

}  // namespace plexus
