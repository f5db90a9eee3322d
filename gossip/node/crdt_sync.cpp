#include "gossip/node/crdt_sync.h"

#include <set>

#include "crdt/merkle_digest.h"

namespace plexus::gossip {

v1::CrdtReply AnswerCrdtRequest(const CrdtReplica* replica, const v1::CrdtRequest& request,
                                std::vector<std::shared_ptr<const ModelState>>* deltas) {
  v1::CrdtReply reply;
  reply.set_id(request.id());
  const std::vector<std::string> entries = replica ? replica->set().Entries() : std::vector<std::string>{};
  switch (request.ask_case()) {
    case v1::CrdtRequest::kNode: {
      const auto [hash, leaf] = MerkleDigest(entries).Node(request.node());
      reply.set_hash(hash);
      reply.set_leaf(leaf);
      break;
    }
    case v1::CrdtRequest::kEntriesUnder:
      for (const std::string& e : MerkleDigest(entries).EntriesUnder(request.entries_under())) reply.add_entries(e);
      break;
    case v1::CrdtRequest::kFetch: {
      if (!replica) break;
      LocalPeer local(*replica);
      Result<StateDelta> delta = local.Fetch({request.fetch().entries().begin(), request.fetch().entries().end()});
      if (!delta.ok()) {
        reply.set_error(delta.status().message());
        break;
      }
      for (const auto& [dot, id] : delta->set.adds()) {
        v1::CrdtAdd* add = reply.add_adds();
        add->mutable_dot()->set_replica(dot.replica);
        add->mutable_dot()->set_counter(dot.counter);
        add->set_id(id);
      }
      for (const Dot& dot : delta->set.tombstones()) {
        v1::CrdtDot* t = reply.add_tombstones();
        t->set_replica(dot.replica);
        t->set_counter(dot.counter);
      }
      for (auto& [id, c] : delta->contributions) {
        v1::CrdtContribution* w = reply.add_contributions();
        w->set_id(id);
        w->set_author(c.author);
        w->set_examples(c.examples);
        w->set_base_version(c.base_version);
        w->set_created_round(c.created_round);
        w->set_signature(c.signature);
        deltas->push_back(std::make_shared<const ModelState>(std::move(c.delta)));
      }
      break;
    }
    default:
      reply.set_error("an empty CRDT request");
  }
  return reply;
}

NetworkSyncPeer::NetworkSyncPeer(uint64_t round, Ask ask, const AuthorKeys* keys)
    : round_(round), ask_(std::move(ask)), keys_(keys) {
  source_.node = [this](const std::string& prefix) -> Result<std::pair<std::string, bool>> {
    v1::CrdtRequest r;
    r.set_node(prefix);
    PLEXUS_ASSIGN_OR_RETURN(v1::CrdtReply reply, AskReply(std::move(r)));
    return std::make_pair(reply.hash(), reply.leaf());
  };
  source_.entries_under = [this](const std::string& prefix) -> Result<std::vector<std::string>> {
    v1::CrdtRequest r;
    r.set_entries_under(prefix);
    PLEXUS_ASSIGN_OR_RETURN(v1::CrdtReply reply, AskReply(std::move(r)));
    return std::vector<std::string>(reply.entries().begin(), reply.entries().end());
  };
}

Result<v1::CrdtReply> NetworkSyncPeer::AskReply(v1::CrdtRequest request) {
  request.set_round(round_);
  PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, ask_(std::move(request)));
  if (!answer.reply.error().empty()) return UnavailableError("the peer could not answer: " + answer.reply.error());
  return std::move(answer.reply);
}

Result<StateDelta> NetworkSyncPeer::Fetch(const std::vector<std::string>& entries) {
  v1::CrdtRequest request;
  request.set_round(round_);
  for (const std::string& e : entries) request.mutable_fetch()->add_entries(e);
  PLEXUS_ASSIGN_OR_RETURN(CrdtAnswer answer, ask_(std::move(request)));
  const v1::CrdtReply& reply = answer.reply;
  if (!reply.error().empty()) return UnavailableError("the peer could not answer: " + reply.error());
  if (static_cast<size_t>(reply.contributions_size()) != answer.deltas.size()) {
    return InvalidArgumentError("a CRDT reply with " + std::to_string(reply.contributions_size()) +
                                " contributions and " + std::to_string(answer.deltas.size()) + " deltas");
  }
  StateDelta delta;
  std::set<std::string> unverifiable;
  for (int i = 0; i < reply.contributions_size(); ++i) {
    const v1::CrdtContribution& w = reply.contributions(i);
    if (!keys_->Knows(w.author())) {
      unverifiable.insert(w.id());
      continue;
    }
    Contribution c;
    c.author = w.author();
    c.examples = w.examples();
    c.base_version = w.base_version();
    c.created_round = w.created_round();
    c.signature = w.signature();
    c.delta = std::move(answer.deltas[static_cast<size_t>(i)]);
    // Whether the id matches the content is checked (with the signature) when it is joined.
    delta.contributions.emplace(w.id(), std::move(c));
  }
  std::map<Dot, std::string> adds;
  for (const v1::CrdtAdd& a : reply.adds()) {
    if (!unverifiable.count(a.id())) adds[{a.dot().replica(), a.dot().counter()}] = a.id();
  }
  std::set<Dot> tombstones;
  for (const v1::CrdtDot& t : reply.tombstones()) tombstones.insert({t.replica(), t.counter()});
  delta.set = ContributionSet::FromState("", std::move(adds), std::move(tombstones));
  return delta;
}

}  // namespace plexus::gossip
