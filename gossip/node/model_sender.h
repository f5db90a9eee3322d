// ModelSender: how a peer node's protocol messages reach other peers (the protocol's
// Actions::Send). A model travels as a stream on the target's link behind a GossipModel header:
// its safetensors prefix and SHA-256 are computed once on a worker thread and kept while the
// model lives, so one model sent to many neighbours is encoded once and never copied (chunks are
// read straight from it). Compressed gossip sends the codec's bytes the protocol made instead.
//
// Borrows the links and the loop's work. Loop thread only.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gossip/node/loop_work.h"
#include "gossip/node/model_streams.h"
#include "gossip/node/peer_links.h"
#include "gossip/protocol/protocol.h"

namespace plexus::gossip {

class ModelSender {
 public:
  struct Hooks {
    std::function<PeerLinks::Link*(NodeId peer)> link_to;  // dialled if need be; null: unreachable
    std::function<v1::GossipEnvelope()> envelope;          // a message carrying the membership rumours
    std::function<void()> encoded;                         // an encoding finished and its sends went out
  };

  // `codec`: the run's compressed-gossip codec (empty: models travel as safetensors only).
  ModelSender(PeerLinks* links, LoopWork* work, std::string codec, Hooks hooks);

  // Sends `m` (a model, its codec's bytes, or a request without a model) to peer `to`.
  void Send(NodeId to, Message m);
  // Encodings in flight: their sends have not reached the links yet.
  bool encoding() const { return !encoding_.empty(); }

 private:
  struct PendingSend {
    NodeId to;
    Message message;
  };
  void SendModelMessage(NodeId to, const Message& m, std::shared_ptr<const std::string> prefix, const std::string& sha);
  void Encode(std::shared_ptr<const ModelState> model);

  PeerLinks* const links_;
  LoopWork* const work_;
  const std::string codec_;
  const Hooks hooks_;
  std::vector<EncodedModel> encoded_;                               // recent encodings, reused per target
  std::map<const ModelState*, std::vector<PendingSend>> encoding_;  // encodings in flight
};

}  // namespace plexus::gossip
