#include "crdt/crdt_replica.h"

#include "aggregators/registry.h"
#include "crdt/merkle_digest.h"

namespace plexus {

Result<std::string> CrdtReplica::Add(const Contribution& c) {
  const std::string id = c.Id();
  PLEXUS_RETURN_IF_ERROR(keys_->Verify(id, c));
  if (!store_.empty() && !store_.begin()->second.delta.CheckSameLayout(c.delta).ok()) {
    return store_.begin()->second.delta.CheckSameLayout(c.delta).WithContext("contribution " + id.substr(0, 12) +
                                                                             "...");
  }
  store_.emplace(id, c);
  set_.Add(id);
  return id;
}

Status CrdtReplica::Retract(const std::string& id) {
  if (!set_.Contains(id)) return NotFoundError("contribution " + id.substr(0, 12) + "... is not live on " + id_);
  set_.Remove(id);
  return Status::Ok();
}

Status CrdtReplica::JoinVerified(const ContributionSet& delta, const std::map<std::string, Contribution>& source) {
  std::map<std::string, const Contribution*> fresh;
  for (const auto& [dot, id] : delta.adds()) {
    if (store_.count(id) || fresh.count(id)) continue;
    auto it = source.find(id);
    if (it == source.end()) return DataLossError("peer lacks the contribution " + id.substr(0, 12) + "... it lists");
    PLEXUS_RETURN_IF_ERROR(keys_->Verify(id, it->second));
    fresh[id] = &it->second;
  }
  for (const auto& [id, c] : fresh) store_.emplace(id, *c);
  set_.Join(delta);
  return Status::Ok();
}

Status CrdtReplica::Join(const CrdtReplica& other) { return JoinVerified(other.set_, other.store_); }

Result<size_t> CrdtReplica::SyncFrom(SyncPeer& peer) {
  size_t node_hashes = 0;
  PLEXUS_ASSIGN_OR_RETURN(std::vector<std::string> missing,
                          MissingFrom(MerkleDigest(set_.Entries()), peer.digest(), &node_hashes));
  if (missing.empty()) return node_hashes;
  PLEXUS_ASSIGN_OR_RETURN(StateDelta delta, peer.Fetch(missing));
  PLEXUS_RETURN_IF_ERROR(JoinVerified(delta.set, delta.contributions));
  return node_hashes;
}

Result<size_t> CrdtReplica::SyncFrom(const CrdtReplica& other) {
  LocalPeer peer(other);
  return SyncFrom(peer);
}

const Contribution* CrdtReplica::Find(const std::string& id) const {
  auto it = store_.find(id);
  return it == store_.end() ? nullptr : &it->second;
}

std::string CrdtReplica::StateDigest() const { return MerkleDigest(set_.Entries()).Root(); }

std::string CrdtReplica::LiveRoot() const {
  std::string all;
  for (const std::string& id : set_.Live()) all += id;
  return Sha256Hex(all);
}

Result<ModelState> CrdtReplica::Resolve(const std::string& strategy, const ModelState& base) const {
  const std::vector<std::string> live = set_.Live();
  if (live.empty()) return FailedPreconditionError("no live contributions on " + id_);
  std::string spec = strategy;
  if (spec.rfind("dare", 0) == 0 && spec.find("seed=") == std::string::npos) {
    // 15 hex digits: a seed below 2^60, within the spec's integer range.
    const std::string seed = std::to_string(std::stoull(LiveRoot().substr(0, 15), nullptr, 16));
    spec += (spec.find(':') == std::string::npos ? ":seed=" : ",seed=") + seed;
  }
  // A fresh instance every time: strategies with state across rounds (fedavgm, fedadam) must not
  // carry it from one resolve to the next, or the result would depend on history, not the set.
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<Aggregator> merge, MakeAggregator(spec, nullptr));
  PLEXUS_RETURN_IF_ERROR(merge->Begin(base));
  for (const std::string& id : live) {
    const Contribution& c = store_.at(id);
    Update u;
    u.client_id = id;  // the aggregators order by client id: canonical hash order
    u.task_id = id;
    u.base_version = base.version();
    u.num_examples = c.examples;
    u.local_steps = 1;
    u.delta = c.delta;
    PLEXUS_RETURN_IF_ERROR(merge->Fold(u).WithContext("contribution " + id.substr(0, 12) + "..."));
  }
  return merge->Finalize();
}

}  // namespace plexus
