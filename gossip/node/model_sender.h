// ModelSender: how a peer node's protocol messages reach other peers (the protocol's
// Actions::Send). A model travels as a stream on the target's link behind a GossipModel header:
// its safetensors prefix (a few hundred bytes of JSON) is made once per model and kept while the
// model lives, so one model sent to many neighbours is never copied (chunks are read straight
// from it), with its chunks' CRC-32Cs, so that it is read once for them however many plaintext
// links it goes out on. The model is not hashed: the link vouches for its bytes (TLS records, or the CRC-32C
// of every plaintext chunk; frame.h). Compressed gossip sends the codec's bytes the protocol made
// instead.
//
// Borrows the links. Loop thread only.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "gossip/node/model_streams.h"
#include "gossip/node/peer_links.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class ModelSender {
 public:
  struct Hooks {
    std::function<PeerLinks::Link*(NodeId peer)> link_to;  // dialled if need be; null: unreachable
    std::function<v1::GossipEnvelope()> envelope;          // a message carrying the membership rumours
  };

  // `codec`: the run's compressed-gossip codec (empty: models travel as safetensors only).
  ModelSender(PeerLinks* links, std::string codec, Hooks hooks);

  // Sends `m` (a model, its codec's bytes, or a request without a model) to peer `to`: queued on
  // the link at once.
  void Send(NodeId to, Message m);

 private:
  const EncodedModel& EncodingOf(const std::shared_ptr<const ModelState>& model);

  PeerLinks* const links_;
  const std::string codec_;
  const Hooks hooks_;
  std::vector<EncodedModel> encoded_;  // recent models' prefixes, reused per target
};

}  // namespace plexus::gossip
