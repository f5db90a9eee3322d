#include "gossip/node/model_sender.h"

#include <string_view>
#include <utility>

#include "core/safetensors.h"

namespace plexus::gossip {

ModelSender::ModelSender(PeerLinks* links, LoopWork* work, std::string codec, Hooks hooks)
    : links_(links), work_(work), codec_(std::move(codec)), hooks_(std::move(hooks)) {}

void ModelSender::Send(NodeId to, Message m) {
  if (!m.model) return SendModelMessage(to, m, nullptr, "");  // a request
  if (m.encoded && !codec_.empty() && m.codec == codec_) return SendModelMessage(to, m, nullptr, "");
  m.encoded = nullptr;  // the model itself travels
  for (const EncodedModel& e : encoded_) {
    if (e.model.lock() == m.model) return SendModelMessage(to, m, e.prefix, e.sha);
  }
  auto [it, first] = encoding_.try_emplace(m.model.get());
  it->second.push_back({to, std::move(m)});
  if (first) Encode(it->second.front().message.model);
}

// A model message to `to`: its header, and the model as a stream of safetensors (the model's
// values behind `prefix`) or, for compressed gossip, of the codec's bytes (small: hashed here).
void ModelSender::SendModelMessage(NodeId to, const Message& m, std::shared_ptr<const std::string> prefix,
                                   const std::string& sha) {
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
    stream.prefix = std::move(prefix);
    if (m.encoded) {
      stream.coded = m.encoded;
      h->set_codec(m.codec);
    }
    h->set_total_bytes(stream.size());
    h->set_sha256(m.encoded ? Sha256Hex(*m.encoded) : sha);
    h->set_stream(links_->QueueStream(c, std::move(stream)));
  }
  links_->Send(c, e);
}

void ModelSender::Encode(std::shared_ptr<const ModelState> model) {
  auto encoded_model = std::make_shared<EncodedModel>();
  work_->OffLoop(
      [model, encoded_model] {
        encoded_model->prefix = std::make_shared<std::string>(SafetensorsPrefix(*model));
        const std::string_view values(reinterpret_cast<const char*>(model->data().data()), model->num_bytes());
        encoded_model->sha = Sha256Hex({*encoded_model->prefix, values});
      },
      [this, model, encoded_model] {
        encoded_model->model = model;
        auto it = encoding_.find(model.get());
        if (it == encoding_.end()) return;
        std::vector<PendingSend> sends = std::move(it->second);
        encoding_.erase(it);
        std::erase_if(encoded_, [](const EncodedModel& e) { return e.model.expired(); });
        if (encoded_.size() >= 4) encoded_.erase(encoded_.begin());
        encoded_.push_back(*encoded_model);
        for (const PendingSend& s : sends) SendModelMessage(s.to, s.message, encoded_model->prefix, encoded_model->sha);
        hooks_.encoded();
      });
}

}  // namespace plexus::gossip
