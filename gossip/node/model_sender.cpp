#include "gossip/node/model_sender.h"

#include <utility>

#include "core/safetensors.h"

namespace plexus::gossip {

ModelSender::ModelSender(PeerLinks* links, std::string codec, Hooks hooks)
    : links_(links), codec_(std::move(codec)), hooks_(std::move(hooks)) {}

const EncodedModel& ModelSender::EncodingOf(const std::shared_ptr<const ModelState>& model) {
  for (const EncodedModel& e : encoded_) {
    if (e.model.lock() == model) return e;
  }
  std::erase_if(encoded_, [](const EncodedModel& e) { return e.model.expired(); });
  if (encoded_.size() >= 4) encoded_.erase(encoded_.begin());
  encoded_.push_back(
      {model, std::make_shared<const std::string>(SafetensorsPrefix(*model)), std::make_shared<ChunkCrcs>()});
  return encoded_.back();
}

void ModelSender::Send(NodeId to, Message m) {
  PeerLinks::Link* c = hooks_.link_to(to);
  if (!c) return;
  v1::GossipEnvelope e = hooks_.envelope();
  v1::GossipModel* h = e.mutable_model();
  h->set_kind(static_cast<v1::GossipModel::Kind>(m.kind));
  h->set_round(m.round);
  h->set_weight(m.weight);
  h->set_degree(m.degree);
  if (m.model) {
    OutboundStream stream;
    stream.model = m.model;
    if (m.encoded && !codec_.empty() && m.codec == codec_) {
      stream.coded = m.encoded;
      h->set_codec(m.codec);
    } else {
      const EncodedModel& encoding = EncodingOf(m.model);  // the model itself travels
      stream.prefix = encoding.prefix;
      stream.crcs = encoding.crcs;
    }
    h->set_total_bytes(stream.size());
    h->set_stream(links_->QueueStream(c, std::move(stream)));
  }
  links_->Send(c, e);
}

}  // namespace plexus::gossip
