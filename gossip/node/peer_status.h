// QueryPeerStatus: what `plexus status --peer` shows, asked of a running `plexus peer` over its
// own port (a status request instead of a hello; the peer answers and closes the link). With
// TLS the asker presents a certificate of the federation's CA (any name). Blocking, with a
// deadline; thread-safe.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gossip/membership/membership.h"
#include "gossip/node/tls_channel.h"

namespace plexus::gossip {

struct PeerStatusReport {
  NodeId node = 0;
  size_t nodes = 0;
  std::string run;  // algorithm/merge/model/partition
  uint64_t rounds_completed = 0;
  uint64_t rounds = 0;
  std::optional<double> accuracy;
  uint64_t accuracy_round = 0;
  std::vector<MemberUpdate> members;  // the peer itself first
  uint64_t bytes_sent = 0, bytes_received = 0, frames_refused = 0;
};

// Unavailable when the peer cannot be reached or does not answer within timeout_ms;
// Unauthenticated when the TLS handshake fails; InvalidArgument for a malformed answer.
Result<PeerStatusReport> QueryPeerStatus(const std::string& address, const std::shared_ptr<const TlsContext>& tls,
                                         double timeout_ms);

}  // namespace plexus::gossip
