// SecureMemberSession: one client's part in one secure aggregation group (privacy/secagg.h), as a
// pure state machine beside ClientSession: each answer of the server (a secagg::View) in, the next
// action out: send this message, ask again later, train now, done, or failed. It holds the
// member's keys and secrets for the group's life and builds each stage's message once (a resent
// message is the same bytes), so whoever carries the messages, `plexus client` over gRPC
// (client/secure_task.cpp) or the simulator's virtual clients in virtual time, runs the same
// member. No I/O, no clock, no logging (an action says what a logging driver may say).
// Movable; thread-compatible.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "privacy/secagg.h"
#include "privacy/secagg_exchange.h"

namespace plexus {

struct SecureAction {
  enum class Kind {
    kSend,      // send `call` (a message of `stage`), then hand the answer to Next
    kAskLater,  // ask again (an empty Call) after `after_ms`
    kTrain,     // train the task and hand the delta to SetUpdate, then ask again
    kDone,      // the group's mean was published with this member's update in it
    kFail,      // `error`: Aborted (the group aborted, or this member refused the server's request),
                // NotFound (the group moved on without this member)
  };
  Kind kind = Kind::kAskLater;
  secagg::Call call;
  secagg::Server::Stage stage = secagg::Server::Stage::kAdvertise;
  int64_t after_ms = 0;
  Status error;
  std::string say;  // kSend: what the message is, for a log line once it is sent
};

class SecureMemberSession {
 public:
  // InvalidArgument for a setup that means nothing (the member's id not in the group, ...).
  static Result<SecureMemberSession> Create(const secagg::Setup& setup);

  // The next action, given the server's latest answer.
  SecureAction Next(const secagg::View& view);
  // The trained delta (kTrain's answer) and a secret of the member's own for the rounding.
  // InvalidArgument for a delta of another length or non-finite values.
  // `noise`: the member's generator, for a group that asks its members for noise (distributed DP).
  Status SetUpdate(std::span<const float> delta, int64_t examples, const Secret32& rounding_seed,
                   GaussianNoise* noise = nullptr);

  const secagg::Setup& setup() const { return setup_; }
  // Delta values clipped to ±clip (after SetUpdate).
  int64_t clipped() const { return clipped_; }
  // Bytes of the messages built so far: the masked update, and everything else (keys and shares).
  int64_t masked_bytes() const { return masked_bytes_; }
  int64_t key_bytes() const { return key_bytes_; }

 private:
  SecureMemberSession(secagg::Setup setup, std::unique_ptr<secagg::Member> member, secagg::WeightedEncoding encoding)
      : setup_(std::move(setup)), member_(std::move(member)), encoding_(std::move(encoding)) {}
  SecureAction Send(secagg::Call call, std::string say);
  // The message of stage_ for `view` (built once); an action other than kSend when it cannot be made.
  SecureAction MessageFor(const secagg::View& view);

  secagg::Setup setup_;
  std::unique_ptr<secagg::Member> member_;
  secagg::WeightedEncoding encoding_;
  secagg::Server::Stage stage_ = secagg::Server::Stage::kAdvertise;  // the next to send for; kDone: waiting
  bool sent_ = false;                                                // stage_'s message went out once
  std::optional<secagg::KeyAdvert> advert_;
  std::optional<secagg::SealedShares> shares_;
  std::optional<std::vector<uint32_t>> encoded_;  // the update, before masking
  std::optional<std::vector<uint32_t>> masked_;
  std::optional<secagg::RevealedShares> revealed_;
  int64_t examples_ = 0;
  int64_t clipped_ = 0;
  int64_t masked_bytes_ = 0, key_bytes_ = 0;
};

// The bytes a call's or a view's payload takes on the wire (keys, sealed shares, values), without
// the framing: what the simulator charges a link for them.
int64_t PayloadBytes(const secagg::Call& call);
int64_t PayloadBytes(const secagg::View& view);

}  // namespace plexus
