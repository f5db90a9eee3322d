#include "gossip/node/crdt_sync.h"

#include <set>

#include "crdt/merkle_digest.h"

namespace plexus::gossip {

v1::CrdtReply AnswerCrdtRequest(const CrdtReplica* replica, const v1::CrdtRequest& request,
                                std::vector<ShippedDelta>* deltas) {
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
        if (c.coded) w->set_codec(c.codec);
        deltas->push_back({std::make_shared<const ModelState>(std::move(c.delta)), c.coded});
      }
      break;
    }
    default:
      reply.set_error("an empty CRDT request");
  }
  return reply;
}

CrdtPull::CrdtPull(uint64_t round, const CrdtReplica& mine, const AuthorKeys* keys)
    : round_(round), keys_(keys), walk_(MerkleDigest(mine.set().Entries())) {}

std::vector<v1::CrdtRequest> CrdtPull::TakeRequests() {
  std::vector<v1::CrdtRequest> out;
  for (const MerkleWalk::Question& q : walk_.TakeQuestions()) {
    v1::CrdtRequest& r = out.emplace_back();
    r.set_round(round_);
    if (q.kind == MerkleWalk::Question::kNode) {
      r.set_node(q.prefix);
    } else {
      r.set_entries_under(q.prefix);
    }
  }
  if (walk_.done() && !walk_.missing().empty() && !fetch_sent_) {
    fetch_sent_ = true;
    v1::CrdtRequest& r = out.emplace_back();
    r.set_round(round_);
    for (const std::string& e : walk_.missing()) r.mutable_fetch()->add_entries(e);
  }
  return out;
}

Status CrdtPull::Answered(const v1::CrdtRequest& request, CrdtAnswer answer) {
  const v1::CrdtReply& reply = answer.reply;
  if (!reply.error().empty()) return UnavailableError("the peer could not answer: " + reply.error());
  switch (request.ask_case()) {
    case v1::CrdtRequest::kNode:
      return walk_.NodeAnswered(request.node(), reply.hash(), reply.leaf());
    case v1::CrdtRequest::kEntriesUnder:
      return walk_.EntriesAnswered(request.entries_under(), {reply.entries().begin(), reply.entries().end()});
    case v1::CrdtRequest::kFetch: {
      if (!fetch_sent_ || delta_) return InvalidArgumentError("a CRDT fetch answer nobody asked for");
      PLEXUS_ASSIGN_OR_RETURN(StateDelta delta, DeltaOf(std::move(answer)));
      delta_ = std::move(delta);
      return Status::Ok();
    }
    default:
      return InvalidArgumentError("an answer to an empty CRDT request");
  }
}

Result<StateDelta> CrdtPull::DeltaOf(CrdtAnswer answer) const {
  const v1::CrdtReply& reply = answer.reply;
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
    if (static_cast<size_t>(i) < answer.coded.size() && answer.coded[static_cast<size_t>(i)]) {
      c.codec = w.codec();  // the delta is the receiver's own decoding of these bytes
      c.coded = std::move(answer.coded[static_cast<size_t>(i)]);
    }
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
