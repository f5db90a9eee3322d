#include <spdlog/spdlog.h>

#include "gossip/node/peer_node_impl.h"

namespace plexus::gossip {

void PeerNode::Impl::Train() {
  if (in_flight.training) return;
  in_flight.training = true;
  std::shared_ptr<const ModelState> start = protocol->model();
  const uint64_t round = protocol->rounds_completed();
  auto result = std::make_shared<Result<ModelState>>(InvalidArgumentError("not trained"));
  work->OffLoop([this, start, round, result] { *result = trainer->Train(*start, round); },
                [this, start, round, result] {
                  in_flight.training = false;
                  if (finished()) return MaybeExit();
                  if (!result->ok()) {
                    spdlog::warn("training round {} failed ({}); keeping the model", round, result->status().message());
                    *result = ModelState(*start);
                  }
                  Handle(protocol->OnTrained(std::move(*result).value()));
                });
}

void PeerNode::Impl::Evaluate() {
  if (in_flight.evaluating) return;
  in_flight.evaluating = true;
  std::shared_ptr<const ModelState> model = protocol->model();
  const uint64_t round = protocol->rounds_completed();
  auto accuracy = std::make_shared<Result<double>>(InvalidArgumentError("not evaluated"));
  work->OffLoop([this, model, accuracy] { *accuracy = trainer->Evaluate(*model); },
                [this, round, accuracy] {
                  in_flight.evaluating = false;
                  if (accuracy->ok()) {
                    stats.accuracy = **accuracy;
                    stats.accuracy_round = round;
                    spdlog::info("peer {}: own model accuracy {:.4f} after {} rounds", o.self, **accuracy, round);
                  }
                  MaybeExit();
                });
}

void PeerNode::Impl::Save() {
  if (!store) return;
  if (in_flight.saving) {
    in_flight.save_again = true;
    return;
  }
  in_flight.saving = true;
  const uint64_t rounds = protocol->rounds_completed();
  std::shared_ptr<const ModelState> model = protocol->model();
  auto members = std::make_shared<std::vector<MemberUpdate>>(membership->Snapshot());
  auto status = std::make_shared<Status>(Status::Ok());
  work->OffLoop([this, rounds, model, members, status] { *status = store->Save(o.self, rounds, *model, *members); },
                [this, status] {
                  in_flight.saving = false;
                  if (!status->ok()) spdlog::error("cannot save the peer's state: {}", status->message());
                  if (in_flight.save_again) {
                    in_flight.save_again = false;
                    if (!finished()) Save();
                  }
                  MaybeExit();
                });
}

void PeerNode::Impl::Progress() {
  if (on_progress) on_progress(Stats());
}

void PeerNode::Impl::ExchangeWithServer(Message m) {
  if (in_flight.exchanging || finished()) return;
  in_flight.exchanging = true;
  auto result = std::make_shared<Result<ModelState>>(InvalidArgumentError("not exchanged"));
  work->OffLoop([this, m, result] { *result = o.server->Exchange(*m.model, m.round); },
                [this, round = m.round, result] {
                  in_flight.exchanging = false;
                  Status check = result->ok() ? (*result)->CheckSameLayout(*protocol->model()) : result->status();
                  if (check.ok()) check = (*result)->CheckFinite();
                  if (!check.ok()) {
                    if (!finished())
                      spdlog::warn("round {}: no average from the server: {}", round + 1, check.message());
                    return MaybeExit();
                  }
                  ++stats.server_exchanges;
                  spdlog::info("round {}: took the server's average (version {})", round + 1, (*result)->version());
                  Deliver(static_cast<NodeId>(o.nodes),
                          Message{Message::Kind::kModelReply, round,
                                  std::make_shared<const ModelState>(std::move(*result).value()), 0.0, 0});
                  MaybeExit();
                });
}

}  // namespace plexus::gossip
