#include "client/secure_member_session.h"

#include <algorithm>
#include <cstdio>

namespace plexus {
namespace {

using Stage = secagg::Server::Stage;

Stage After(Stage s) {
  switch (s) {
    case Stage::kAdvertise:
      return Stage::kShareKeys;
    case Stage::kShareKeys:
      return Stage::kMaskedInput;
    case Stage::kMaskedInput:
      return Stage::kUnmask;
    default:
      return Stage::kDone;
  }
}

SecureAction Failed(Status why) {
  SecureAction a;
  a.kind = SecureAction::Kind::kFail;
  a.error = std::move(why);
  return a;
}

SecureAction AskLater(int64_t ms) {
  SecureAction a;
  a.kind = SecureAction::Kind::kAskLater;
  a.after_ms = std::max<int64_t>(10, ms);
  return a;
}

int64_t SharesBytes(const std::map<uint32_t, ShamirShare>& shares) {
  int64_t n = 0;
  for (const auto& [owner, share] : shares) n += 8 + static_cast<int64_t>(share.y.size());
  return n;
}

}  // namespace

Result<SecureMemberSession> SecureMemberSession::Create(const secagg::Setup& setup) {
  PLEXUS_ASSIGN_OR_RETURN(std::unique_ptr<secagg::Member> member, secagg::Member::Create(setup.params, setup.member));
  PLEXUS_ASSIGN_OR_RETURN(secagg::WeightedEncoding encoding, secagg::WeightedEncoding::For(setup));
  return SecureMemberSession(setup, std::move(member), std::move(encoding));
}

Status SecureMemberSession::SetUpdate(std::span<const float> delta, int64_t examples, const Secret32& rounding_seed,
                                      GaussianNoise* noise) {
  PLEXUS_ASSIGN_OR_RETURN(std::vector<uint32_t> encoded,
                          encoding_.Encode(delta, examples, rounding_seed, &clipped_, noise));
  encoded_ = std::move(encoded);
  examples_ = examples;
  return Status::Ok();
}

SecureAction SecureMemberSession::Send(secagg::Call call, std::string say) {
  sent_ = true;
  SecureAction a;
  a.kind = SecureAction::Kind::kSend;
  a.call = std::move(call);
  a.stage = stage_;
  a.say = std::move(say);
  return a;
}

SecureAction SecureMemberSession::Next(const secagg::View& view) {
  if (view.stage == Stage::kAborted) {
    return Failed(AbortedError("the secure aggregation group aborted: " + view.abort_reason));
  }
  if (stage_ == Stage::kDone) {
    if (view.stage != Stage::kDone) return AskLater(view.retry_after_ms);
    SecureAction done;
    done.kind = SecureAction::Kind::kDone;
    return done;
  }
  if (stage_ == Stage::kMaskedInput && !encoded_) {  // trains while the others share keys
    if (view.stage > Stage::kMaskedInput) {
      return Failed(NotFoundError("the secure aggregation group moved on to '" + secagg::StageName(view.stage) +
                                  "' before this client's update was trained"));
    }
    SecureAction a;
    a.kind = SecureAction::Kind::kTrain;
    return a;
  }
  if (view.stage < stage_) return AskLater(view.retry_after_ms);
  if (view.stage > stage_ || view.answered) {  // this stage is over for this member
    if (!sent_) {
      return Failed(NotFoundError("the secure aggregation group moved on to '" + secagg::StageName(view.stage) +
                                  "' without this client's '" + secagg::StageName(stage_) + "' message"));
    }
    stage_ = After(stage_);
    sent_ = false;
    return Next(view);
  }
  return MessageFor(view);
}

SecureAction SecureMemberSession::MessageFor(const secagg::View& view) {
  secagg::Call call;
  char say[256];
  switch (stage_) {
    case Stage::kAdvertise: {
      if (!advert_) {
        Result<secagg::KeyAdvert> advert = member_->Advertise();
        if (!advert.ok()) return Failed(advert.status());
        advert_ = *advert;
        key_bytes_ += 64;
      }
      call.kind = secagg::Call::Kind::kAdvert;
      call.advert = *advert_;
      std::snprintf(say, sizeof say, "advertised keys (member %u of %zu, degree %d, threshold %d)", setup_.member,
                    setup_.params.members.size(), setup_.params.degree, setup_.params.threshold);
      return Send(std::move(call), say);
    }
    case Stage::kShareKeys: {
      if (!shares_) {
        Result<secagg::SealedShares> shares = member_->ShareKeys(view.adverts);
        if (!shares.ok()) return Failed(AbortedError(std::string(shares.status().message())));
        shares_ = std::move(shares).value();
        for (const auto& [to, sealed] : shares_->to) key_bytes_ += 4 + static_cast<int64_t>(sealed.size());
      }
      call.kind = secagg::Call::Kind::kShares;
      call.shares = *shares_;
      std::snprintf(say, sizeof say, "shared keys with %zu neighbours", shares_->to.size());
      return Send(std::move(call), say);
    }
    case Stage::kMaskedInput: {
      if (!masked_) {
        Result<secagg::MaskedInput> masked = member_->MaskInput(*encoded_, view.shares);
        if (!masked.ok()) return Failed(AbortedError(std::string(masked.status().message())));
        masked_ = std::move(masked->values);
        masked_bytes_ += 4 * static_cast<int64_t>(masked_->size());
      }
      const size_t offset = std::min<size_t>(view.masked_received, masked_->size());
      const size_t n = std::min(secagg::kMaxChunkValues, masked_->size() - offset);
      call.kind = secagg::Call::Kind::kMaskedChunk;
      call.offset = offset;
      call.values.assign(masked_->begin() + static_cast<std::ptrdiff_t>(offset),
                         masked_->begin() + static_cast<std::ptrdiff_t>(offset + n));
      say[0] = '\0';
      if (offset + n == masked_->size()) {
        std::snprintf(say, sizeof say,
                      "sent the masked update (%zu values, %zu bytes; %lld values clipped to ±%g; %lld examples)",
                      masked_->size(), 4 * masked_->size(), static_cast<long long>(clipped_), setup_.clip,
                      static_cast<long long>(examples_));
      }
      return Send(std::move(call), say);
    }
    case Stage::kUnmask: {
      if (!revealed_) {
        Result<secagg::RevealedShares> revealed = member_->Unmask(view.unmask);
        if (!revealed.ok()) {
          return Failed(
              AbortedError("refused the server's unmask request: " + std::string(revealed.status().message())));
        }
        revealed_ = std::move(revealed).value();
        key_bytes_ += SharesBytes(revealed_->self_seed) + SharesBytes(revealed_->mask_key);
      }
      call.kind = secagg::Call::Kind::kRevealed;
      call.revealed = *revealed_;
      std::snprintf(say, sizeof say, "revealed shares (%zu survivors, %zu dropped)", view.unmask.survivors.size(),
                    view.unmask.dropped.size());
      return Send(std::move(call), say);
    }
    default:
      return AskLater(view.retry_after_ms);
  }
}

int64_t PayloadBytes(const secagg::Call& call) {
  int64_t n = 16;  // ids and the stage
  n += 64 * (call.kind == secagg::Call::Kind::kAdvert);
  for (const auto& [to, sealed] : call.shares.to) n += 4 + static_cast<int64_t>(sealed.size());
  n += 4 * static_cast<int64_t>(call.values.size());
  n += SharesBytes(call.revealed.self_seed) + SharesBytes(call.revealed.mask_key);
  return n;
}

int64_t PayloadBytes(const secagg::View& view) {
  int64_t n = 16;
  if (view.setup) n += 64 + 4 * static_cast<int64_t>(view.setup->params.members.size());
  n += 68 * static_cast<int64_t>(view.adverts.size());
  for (const auto& [from, sealed] : view.shares) n += 4 + static_cast<int64_t>(sealed.size());
  n += 4 * static_cast<int64_t>(view.unmask.survivors.size() + view.unmask.dropped.size());
  return n;
}

}  // namespace plexus
