#include "gossip/node/crdt_pulls.h"

#include <spdlog/spdlog.h>

#include <utility>
#include <vector>

#include "core/safetensors.h"
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
  if (in_flight_ || queue_.empty() || stopped_) return;
  const Actions::Sync s = queue_.front();
  queue_.pop_front();
  const CrdtReplica* mine = hooks_.replica(s.round);
  auto copy = std::make_shared<CrdtReplica>(mine ? *mine : CrdtReplica("peer-" + std::to_string(self_), keys_));
  auto result = std::make_shared<Result<size_t>>(InvalidArgumentError("not synced"));
  in_flight_ = true;
  work_->OnOwnThread(
      [this, s, copy, result] {
        NetworkSyncPeer peer(
            s.round,
            [this, to = s.from](v1::CrdtRequest request) -> Result<CrdtAnswer> {
              auto promise = std::make_shared<std::promise<Result<CrdtAnswer>>>();
              std::future<Result<CrdtAnswer>> answer = promise->get_future();
              work_->Post([this, to, request = std::move(request), promise]() mutable {
                Ask(to, std::move(request), promise);
              });
              if (answer.wait_for(kAnswerTimeout) != std::future_status::ready) {
                return UnavailableError("peer " + std::to_string(to) + " did not answer in " +
                                        std::to_string(kAnswerTimeout.count()) + " s");
              }
              return answer.get();
            },
            keys_);
        *result = copy->SyncFrom(peer);
      },
      [this, s, copy, result] {
        in_flight_ = false;
        if (!result->ok())
          spdlog::debug("pull from peer {} (round {}): {}", s.from, s.round, result->status().message());
        hooks_.synced(s.from, s.round, result->ok() ? copy.get() : nullptr);
        Pump();
      });
}

void CrdtPulls::Ask(NodeId to, v1::CrdtRequest request, std::shared_ptr<std::promise<Result<CrdtAnswer>>> promise) {
  PeerLinks::Link* c = stopped_ ? nullptr : hooks_.link_to(to);
  if (!c || c->closing) {
    promise->set_value(UnavailableError("no link to peer " + std::to_string(to)));
    return;
  }
  const uint64_t id = next_request_++;
  request.set_id(id);
  pending_[id] = Pending{c, std::move(promise), {}, 0};
  v1::GossipEnvelope e = hooks_.envelope();
  *e.mutable_crdt_request() = std::move(request);
  links_->Send(c, e);
}

void CrdtPulls::Answer(PeerLinks::Link* c, const CrdtReplica* replica, const v1::CrdtRequest& request) {
  std::vector<std::shared_ptr<const ModelState>> deltas;
  v1::GossipEnvelope e = hooks_.envelope();
  v1::CrdtReply* reply = e.mutable_crdt_reply();
  *reply = AnswerCrdtRequest(replica, request, &deltas);
  for (size_t i = 0; i < deltas.size(); ++i) {
    auto prefix = std::make_shared<const std::string>(SafetensorsPrefix(*deltas[i]));
    const std::string_view values(reinterpret_cast<const char*>(deltas[i]->data().data()), deltas[i]->num_bytes());
    v1::CrdtContribution* w = reply->mutable_contributions(static_cast<int>(i));
    OutboundStream stream;
    stream.model = deltas[i];
    stream.prefix = prefix;
    w->set_total_bytes(stream.size());
    w->set_sha256(Sha256Hex({*prefix, values}));
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
    v1::GossipModel header;
    header.set_kind(v1::GossipModel::CRDT_DELTA);
    header.set_stream(w.stream());
    header.set_total_bytes(w.total_bytes());
    header.set_sha256(w.sha256());
    header.set_request(reply.id());
    header.set_part(static_cast<uint32_t>(i));
    PLEXUS_RETURN_IF_ERROR(links_->Expect(c, header, /*bytes_stream=*/false));
  }
  p.answer.reply = reply;
  p.answer.deltas.resize(static_cast<size_t>(reply.contributions_size()));
  p.deltas_left = p.answer.deltas.size();
  if (p.deltas_left == 0) Resolve(it, std::move(p.answer));
  return Status::Ok();
}

Status CrdtPulls::DeltaDecoded(NodeId from, const v1::GossipModel& h, Result<ModelState> model) {
  auto it = pending_.find(h.request());
  if (it == pending_.end()) return Status::Ok();  // its link closed meanwhile: the pull has failed already
  Pending& p = it->second;
  Status check = model.status();  // decoded and checked on the worker
  if (check.ok() && h.part() >= p.answer.deltas.size()) check = InvalidArgumentError("out of place");
  if (!check.ok()) {
    Resolve(it, InvalidArgumentError("peer " + std::to_string(from) + " sent a bad contribution"));
    return check;
  }
  p.answer.deltas[h.part()] = std::move(model).value();
  if (--p.deltas_left == 0) Resolve(it, std::move(p.answer));
  return Status::Ok();
}

void CrdtPulls::LinkClosed(PeerLinks::Link* c, const std::string& why) { Fail(c, "the link closed: " + why); }

void CrdtPulls::Stop() {
  stopped_ = true;
  queue_.clear();
  Fail(nullptr, "this node is leaving");
}

void CrdtPulls::Fail(PeerLinks::Link* c, const std::string& why) {
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (c != nullptr && it->second.link != c) {
      ++it;
      continue;
    }
    if (!it->second.abandoned) it->second.promise->set_value(UnavailableError(why));
    it->second.abandoned = true;
    it = c != nullptr ? pending_.erase(it) : std::next(it);
  }
}

void CrdtPulls::Resolve(std::map<uint64_t, Pending>::iterator it, Result<CrdtAnswer> answer) {
  if (!it->second.abandoned) it->second.promise->set_value(std::move(answer));
  pending_.erase(it);
}

}  // namespace plexus::gossip
