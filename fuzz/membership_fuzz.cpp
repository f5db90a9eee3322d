// libFuzzer target: the SWIM membership state machine (gossip/membership/membership.h) fed rumours, pings,
// acks and ticks as any peer could send them (plaintext, or a peer holding a valid certificate).
// Each 12-byte record is one event: kind, node, state and an incarnation (often near the limits).
// Whatever arrives, nothing crashes, this node's incarnation never decreases (a "dead" rumour at
// 2^64-1 once wrapped its refutation to 0 and evicted it for good), and it stays below the limit.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gossip/membership/membership.h"

using plexus::gossip::Membership;
using plexus::gossip::MemberState;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr uint64_t kStart = uint64_t{1} << 41;  // a wall clock in milliseconds, as drivers start
  Membership m(0, "127.0.0.1:1", kStart, plexus::gossip::MembershipOptions{}, 7);
  double now = 0;
  uint64_t last = m.incarnation();
  std::vector<Membership::Probe> probes;
  Membership::Changes changes;
  for (size_t at = 0; at + 12 <= size; at += 12) {
    const uint8_t kind = data[at] % 5;
    const auto node = static_cast<plexus::gossip::NodeId>(data[at + 1] % 8);
    const auto state = static_cast<MemberState>(data[at + 2] % 4);
    uint64_t inc = 0;
    std::memcpy(&inc, data + at + 4, sizeof inc);
    switch (data[at + 3] % 4) {  // incarnations where the bugs live: near 0, the start, the limit, anywhere
      case 0:
        inc %= 16;
        break;
      case 1:
        inc = kStart + inc % 16;
        break;
      case 2:
        inc = Membership::kMaxIncarnation - 4 + inc % 8;
        break;
      default:
        break;
    }
    probes.clear();
    switch (kind) {
      case 0:
        (void)m.Apply({node, "127.0.0.1:2", inc, state}, now, &changes);
        break;
      case 1:
        m.OnPing(node, static_cast<plexus::gossip::NodeId>(inc % 8), inc, now, &probes);
        break;
      case 2:
        m.OnAck(node, static_cast<plexus::gossip::NodeId>(inc % 8), inc, now, &probes, &changes);
        break;
      case 3:
        now += static_cast<double>(inc % 5000);
        m.Tick(now, &probes, &changes);
        break;
      default:
        (void)m.Piggyback();
        break;
    }
    if (m.incarnation() < last || m.incarnation() >= Membership::kMaxIncarnation) std::abort();
    last = m.incarnation();
  }
  return 0;
}
