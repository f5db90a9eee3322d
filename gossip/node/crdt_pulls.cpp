#include "gossip/node/crdt_pulls.h"

#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "core/safetensors.h"
#include "core/value_bytes.h"
#include "crdt/crdt_replica.h"

namespace plexus::gossip {

CrdtPulls::CrdtPulls(NodeId self, size_t nodes, PeerLinks* links, LoopWork* work, const AuthorKeys* keys, Hooks hooks)
    : self_(self), nodes_(nodes), links_(links), work_(work), keys_(keys), hooks_(std::move(hooks)) {}

void CrdtPulls::Queue(const Actions::Sync& s) {
  if (stopped_ || s.from >= nodes_ || s.from == self_) return;
  for (const Actions::Sync& q : queue_) {
    if (q.from == s.from && q.round == s.round) return;
  }
  queue_.push_back(s);
  Pump();
}

void CrdtPulls::Pump() {
  if (pull_ || queue_.empty() || stopped_) return;
  const Actions::Sync s = queue_.front();
  queue_.pop_front();
  const CrdtReplica* mine = hooks_.replica(s.round);
  auto copy = std::make_shared<CrdtReplica>(mine ? *mine : CrdtReplica("peer-" + std::to_string(self_), keys_));
  pull_.emplace(Pull{s, copy, CrdtPull(s.round, *copy, keys_), false, ""});
  Advance();
}

void CrdtPulls::Advance() {
  Pull& p = *pull_;
  std::vector<v1::CrdtRequest> requests = p.machine.TakeRequests();
  if (!requests.empty()) {
    PeerLinks::Link* c = hooks_.link_to(p.sync.from);
    if (!c || c->closing) {
      p.failed = "no link to peer " + std::to_string(p.sync.from);
      return;
    }
    for (v1::CrdtRequest& r : requests) {
      const uint64_t id = next_request_++;
      r.set_id(id);
      v1::GossipEnvelope e = hooks_.envelope();
      *e.mutable_crdt_request() = r;
      pending_.emplace(id, Pending{c, std::move(r), hooks_.now_ms(), {}, 0});
      links_->Send(c, e);
    }
    return;
  }
  if (!p.machine.done()) return;  // answers are on their way
  if (p.machine.delta().set.adds().empty() && p.machine.delta().set.tombstones().empty()) {
    return End(p.copy.get(), "");  // nothing to join: the copy holds all the peer holds
  }
  // Verifying the fetched contributions hashes whole models: a worker's job, not the loop's.
  p.joining = true;
  auto delta = std::make_shared<StateDelta>(p.machine.TakeDelta());
  auto joined = std::make_shared<Status>();
  work_->OffLoop([copy = p.copy, delta, joined] { *joined = copy->Restore(delta->set, delta->contributions); },
                 [this, copy = p.copy, joined] {
                   pull_->joining = false;
                   if (stopped_) return End(nullptr, "this node is leaving");
                   End(joined->ok() ? copy.get() : nullptr, joined->ok() ? "" : joined->message());
                 });
}

void CrdtPulls::End(const CrdtReplica* synced, const std::string& why) {
  const Pull ended = std::move(*pull_);  // keeps the copy alive through the hook
  pull_.reset();
  for (auto& [id, q] : pending_) q.abandoned = true;  // every question still out was the pull's
  if (!why.empty()) spdlog::debug("pull from peer {} (round {}): {}", ended.sync.from, ended.sync.round, why);
  hooks_.synced(ended.sync.from, ended.sync.round, synced);
  Pump();
}

void CrdtPulls::Answer(PeerLinks::Link* c, const CrdtReplica* replica, const v1::CrdtRequest& request) {
  std::vector<ShippedDelta> deltas;
  v1::GossipEnvelope e = hooks_.envelope();
  v1::CrdtReply* reply = e.mutable_crdt_reply();
  *reply = AnswerCrdtRequest(replica, request, &deltas);
  for (size_t i = 0; i < deltas.size(); ++i) {
    v1::CrdtContribution* w = reply->mutable_contributions(static_cast<int>(i));
    OutboundStream stream;
    stream.model = deltas[i].values;
    if (deltas[i].coded) {  // the codec's bytes as they came from the author
      stream.coded = deltas[i].coded;
      w->set_sha256(Sha256Hex(*stream.coded));
    } else {
      stream.prefix = std::make_shared<const std::string>(SafetensorsPrefix(*stream.model));
      w->set_sha256(Sha256Hex({*stream.prefix, ValueBytes(*stream.model)}));
    }
    w->set_total_bytes(stream.size());
    w->set_stream(links_->QueueStream(c, std::move(stream)));
  }
  links_->Send(c, e);
}

Status CrdtPulls::ReplyArrived(PeerLinks::Link* c, const v1::CrdtReply& reply) {
  auto it = pending_.find(reply.id());
  if (it == pending_.end() || it->second.link != c) {
    return InvalidArgumentError("a CRDT reply to no request of this link");
  }
  Pending& p = it->second;
  for (int i = 0; i < reply.contributions_size(); ++i) {
    const v1::CrdtContribution& w = reply.contributions(i);
    // A contribution's hash is its identity: always announced, and checked as the delta arrives.
    if (w.sha256().empty()) return InvalidArgumentError("a CRDT contribution announced without its SHA-256");
    v1::GossipModel header;
    header.set_kind(v1::GossipModel::CRDT_DELTA);
    header.set_round(p.request.round());  // which round's layout the delta must have
    header.set_stream(w.stream());
    header.set_total_bytes(w.total_bytes());
    header.set_sha256(w.sha256());
    header.set_request(reply.id());
    header.set_part(static_cast<uint32_t>(i));
    header.set_codec(w.codec());  // the receiver decodes a codec's bytes with its own contribution codec
    PLEXUS_RETURN_IF_ERROR(links_->Expect(c, header, /*bytes_stream=*/!w.codec().empty()));
  }
  p.answer.reply = reply;
  p.answer.deltas.resize(static_cast<size_t>(reply.contributions_size()));
  p.answer.coded.resize(p.answer.deltas.size());
  p.deltas_left = p.answer.deltas.size();
  if (p.deltas_left == 0) Answered(it);
  return Status::Ok();
}

Status CrdtPulls::DeltaDecoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model,
                               std::shared_ptr<const std::string> coded) {
  auto it = pending_.find(h.request());
  if (it == pending_.end()) return Status::Ok();  // its link closed meanwhile: the pull has failed already
  Pending& p = it->second;
  if (p.abandoned) {
    if (--p.deltas_left == 0) pending_.erase(it);
    return Status::Ok();
  }
  Status check = model.status();  // decoded and checked on the worker
  if (check.ok() && h.part() >= p.answer.deltas.size()) check = InvalidArgumentError("out of place");
  if (!check.ok()) {
    if (--p.deltas_left == 0) pending_.erase(it);
    End(nullptr, "peer " + std::to_string(from) + " sent a bad contribution: " + check.message());
    return check;
  }
  p.answer.deltas[h.part()] = std::move(model).value();
  p.answer.coded[h.part()] = std::move(coded);
  if (--p.deltas_left == 0) Answered(it);
  return Status::Ok();
}

void CrdtPulls::Answered(std::map<uint64_t, Pending>::iterator it) {
  Pending answered = std::move(it->second);
  pending_.erase(it);
  if (answered.abandoned || !pull_ || pull_->joining) return;
  if (Status s = pull_->machine.Answered(answered.request, std::move(answered.answer)); !s.ok()) {
    return End(nullptr, s.message());
  }
  Advance();
}

void CrdtPulls::LinkClosed(PeerLinks::Link* c, const std::string& why) {
  bool pulls_question = false;
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (it->second.link != c) {
      ++it;
      continue;
    }
    pulls_question |= !it->second.abandoned;
    it = pending_.erase(it);
  }
  if (pulls_question && pull_ && !pull_->joining) End(nullptr, "the link closed: " + why);
}

void CrdtPulls::Tick() {
  // Questions of ended pulls whose answers never came are forgotten after twice the timeout (an
  // answer after that is refused as unasked for).
  const double now = hooks_.now_ms();
  std::erase_if(pending_, [&](const auto& q) {
    return q.second.abandoned && q.second.deltas_left == 0 && now - q.second.asked_ms > 2 * kAnswerTimeoutMs;
  });
  if (!pull_ || pull_->joining) return;
  if (!pull_->failed.empty()) return End(nullptr, pull_->failed);
  for (const auto& [id, q] : pending_) {
    if (!q.abandoned && now - q.asked_ms > kAnswerTimeoutMs) {
      return End(nullptr, "peer " + std::to_string(pull_->sync.from) + " did not answer in " +
                              std::to_string(static_cast<int64_t>(kAnswerTimeoutMs / 1000)) + " s");
    }
  }
}

void CrdtPulls::Stop() {
  stopped_ = true;
  queue_.clear();
  for (auto& [id, q] : pending_) q.abandoned = true;
  // A join on a worker ends itself (and the node waits for it: in_flight); any other pull ends
  // here, its result unwanted.
  if (pull_ && !pull_->joining) pull_.reset();
}

}  // namespace plexus::gossip
