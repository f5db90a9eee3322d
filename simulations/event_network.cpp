#include "simulations/event_network.h"

#include <algorithm>
#include <utility>

namespace plexus {
namespace {

double TransferMs(uint64_t bytes, double mbps) { return static_cast<double>(bytes) * 8.0 / 1e6 / mbps * 1000.0; }

}  // namespace

EventNetwork::NodeId EventNetwork::AddNode(const AccessLink& link) {
  if (links_.empty() || !(links_.back() == link)) links_.push_back(link);
  nodes_.push_back({static_cast<uint32_t>(links_.size() - 1), now_ms_, now_ms_});
  return static_cast<NodeId>(nodes_.size() - 1);
}

void EventNetwork::After(double delay_ms, Handler handler) {
  events_.push({now_ms_ + std::max(0.0, delay_ms), seq_++, std::move(handler)});
}

bool EventNetwork::Send(NodeId from, NodeId to, uint64_t bytes, Handler on_delivery) {
  if (!Reachable(from, to)) {
    ++messages_lost_;
    return false;
  }
  Node& src = nodes_[from];
  Node& dst = nodes_[to];
  const AccessLink& up = links_[src.link];
  const AccessLink& down = links_[dst.link];
  // An unlimited link holds nothing up; a limited one is reserved in the order messages are sent.
  double at = now_ms_;
  if (up.up_mbps > 0) at = src.up_free_ms = std::max(at, src.up_free_ms) + TransferMs(bytes, up.up_mbps);
  at += up.latency_ms + down.latency_ms;
  if (down.down_mbps > 0) at = dst.down_free_ms = std::max(at, dst.down_free_ms) + TransferMs(bytes, down.down_mbps);
  events_.push({at, seq_++, [this, bytes, h = std::move(on_delivery)] {
                  ++messages_delivered_;
                  bytes_delivered_ += bytes;
                  h();
                }});
  return true;
}

bool EventNetwork::SendControl(NodeId from, NodeId to, uint64_t bytes, Handler on_delivery) {
  if (!Reachable(from, to)) {
    ++messages_lost_;
    return false;
  }
  const AccessLink& up = links_[nodes_[from].link];
  const AccessLink& down = links_[nodes_[to].link];
  double at = now_ms_ + up.latency_ms + down.latency_ms;
  if (up.up_mbps > 0) at += TransferMs(bytes, up.up_mbps);
  if (down.down_mbps > 0) at += TransferMs(bytes, down.down_mbps);
  events_.push({at, seq_++, [this, bytes, h = std::move(on_delivery)] {
                  ++messages_delivered_;
                  bytes_delivered_ += bytes;
                  h();
                }});
  return true;
}

int64_t EventNetwork::Run(double until_ms) {
  stopped_ = false;
  int64_t run = 0;
  while (!events_.empty() && !stopped_ && events_.top().at_ms <= until_ms) {
    // Moved out before running: the handler may schedule more events.
    Event e = std::move(const_cast<Event&>(events_.top()));
    events_.pop();
    now_ms_ = e.at_ms;
    e.handler();
    ++run;
  }
  return run;
}

}  // namespace plexus
