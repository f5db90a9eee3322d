#include "gossip/protocol/protocol.h"

#include <utility>

namespace plexus::gossip {

void Actions::Append(Actions&& other) {
  for (Send& s : other.sends) sends.push_back(std::move(s));
  for (Timer& t : other.timers) timers.push_back(t);
  for (Sync& s : other.syncs) syncs.push_back(s);
  train = train || other.train;
  rounds_completed += other.rounds_completed;
}

void PeerView::SampleOutNeighbours(NodeId self, uint64_t round, size_t k, Rng& rng, std::vector<NodeId>* out) const {
  OutNeighbours(self, round, out);
  if (out->size() <= k) return;
  // A partial Fisher-Yates shuffle: the first k are a uniform sample.
  for (size_t i = 0; i < k; ++i) std::swap((*out)[i], (*out)[i + rng.Below(out->size() - i)]);
  out->resize(k);
}

}  // namespace plexus::gossip
