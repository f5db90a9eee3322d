#include "proto/secagg_wire.h"

#include <bit>
#include <cstring>

namespace plexus {
namespace {

// Masked values travel as little-endian uint32, copied as they lie in memory.
static_assert(std::endian::native == std::endian::little, "the wire format is little-endian");

std::string Bytes(const auto& array) { return std::string(reinterpret_cast<const char*>(array.data()), array.size()); }

Status Key(const std::string& bytes, PublicKey32* out, const char* what) {
  if (bytes.size() != out->size()) {
    return InvalidArgumentError(std::string("secagg: a ") + what + " of " + std::to_string(bytes.size()) +
                                " bytes, not 32");
  }
  std::memcpy(out->data(), bytes.data(), out->size());
  return Status::Ok();
}

void AdvertToProto(const secagg::KeyAdvert& a, v1::SecAggKeyAdvert* out) {
  out->set_seal_key(Bytes(a.seal_key));
  out->set_mask_key(Bytes(a.mask_key));
  out->set_from(a.from);
}

Result<secagg::KeyAdvert> AdvertFromProto(const v1::SecAggKeyAdvert& in) {
  secagg::KeyAdvert a;
  a.from = in.from();
  PLEXUS_RETURN_IF_ERROR(Key(in.seal_key(), &a.seal_key, "seal key"));
  PLEXUS_RETURN_IF_ERROR(Key(in.mask_key(), &a.mask_key, "mask key"));
  return a;
}

void SharesToProto(const std::map<uint32_t, ShamirShare>& shares,
                   google::protobuf::Map<uint32_t, v1::SecAggShare>* out) {
  for (const auto& [owner, share] : shares) {
    v1::SecAggShare& s = (*out)[owner];
    s.set_x(share.x);
    s.set_y(Bytes(share.y));
  }
}

Result<std::map<uint32_t, ShamirShare>> SharesFromProto(const google::protobuf::Map<uint32_t, v1::SecAggShare>& in) {
  std::map<uint32_t, ShamirShare> out;
  for (const auto& [owner, s] : in) {
    if (s.y().size() != kShamirShareBytes) {
      return InvalidArgumentError("secagg: a share of " + std::to_string(s.y().size()) + " bytes, not " +
                                  std::to_string(kShamirShareBytes));
    }
    out[owner] = ShamirShare{s.x(), std::vector<uint8_t>(s.y().begin(), s.y().end())};
  }
  return out;
}

std::vector<uint8_t> Vec(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

}  // namespace

void SecAggCallToProto(const secagg::Call& call, v1::SecAggRequest* out) {
  out->set_want_setup(call.want_setup);
  switch (call.kind) {
    case secagg::Call::Kind::kQuery:
      out->set_query(true);
      break;
    case secagg::Call::Kind::kAdvert:
      AdvertToProto(call.advert, out->mutable_advert());
      break;
    case secagg::Call::Kind::kShares:
      for (const auto& [to, sealed] : call.shares.to) (*out->mutable_shares()->mutable_to())[to] = Bytes(sealed);
      break;
    case secagg::Call::Kind::kMaskedChunk: {
      v1::SecAggMaskedChunk* chunk = out->mutable_masked();
      chunk->set_offset(call.offset);
      chunk->set_values(reinterpret_cast<const char*>(call.values.data()), call.values.size() * sizeof(uint32_t));
      break;
    }
    case secagg::Call::Kind::kRevealed:
      SharesToProto(call.revealed.self_seed, out->mutable_revealed()->mutable_self_seed());
      SharesToProto(call.revealed.mask_key, out->mutable_revealed()->mutable_mask_key());
      break;
  }
}

Result<secagg::Call> SecAggCallFromProto(const v1::SecAggRequest& in) {
  secagg::Call call;
  call.want_setup = in.want_setup();
  switch (in.message_case()) {
    case v1::SecAggRequest::MESSAGE_NOT_SET:
    case v1::SecAggRequest::kQuery:
      call.kind = secagg::Call::Kind::kQuery;
      break;
    case v1::SecAggRequest::kAdvert: {
      call.kind = secagg::Call::Kind::kAdvert;
      PLEXUS_ASSIGN_OR_RETURN(call.advert, AdvertFromProto(in.advert()));
      break;
    }
    case v1::SecAggRequest::kShares:
      call.kind = secagg::Call::Kind::kShares;
      for (const auto& [to, sealed] : in.shares().to()) call.shares.to[to] = Vec(sealed);
      break;
    case v1::SecAggRequest::kMasked: {
      call.kind = secagg::Call::Kind::kMaskedChunk;
      call.offset = in.masked().offset();
      const std::string& bytes = in.masked().values();
      if (bytes.size() % 4 != 0) {
        return InvalidArgumentError("secagg: a masked chunk of " + std::to_string(bytes.size()) +
                                    " bytes, not whole uint32 values");
      }
      call.values.resize(bytes.size() / 4);
      std::memcpy(call.values.data(), bytes.data(), bytes.size());
      break;
    }
    case v1::SecAggRequest::kRevealed: {
      call.kind = secagg::Call::Kind::kRevealed;
      PLEXUS_ASSIGN_OR_RETURN(call.revealed.self_seed, SharesFromProto(in.revealed().self_seed()));
      PLEXUS_ASSIGN_OR_RETURN(call.revealed.mask_key, SharesFromProto(in.revealed().mask_key()));
      break;
    }
  }
  return call;
}

void SecAggViewToProto(const secagg::View& view, v1::SecAggReply* out) {
  out->set_stage(static_cast<v1::SecAggReply::Stage>(static_cast<int>(view.stage)));
  out->set_answered(view.answered);
  if (view.setup) {
    const secagg::Setup& s = *view.setup;
    v1::SecAggSetup* p = out->mutable_setup();
    p->set_binding(s.params.round);
    p->set_member(s.member);
    for (uint32_t m : s.params.members) p->add_members(m);
    p->set_degree(s.params.degree);
    p->set_threshold(s.params.threshold);
    p->set_graph_seed(s.params.graph_seed);
    p->set_length(s.params.length);
    p->set_clip(s.clip);
    p->set_weight_cap(s.weight_cap);
    p->set_l2_clip(s.l2_clip);
    p->set_noise_std(s.noise_std);
  }
  for (const secagg::KeyAdvert& a : view.adverts) AdvertToProto(a, out->add_adverts());
  for (const auto& [from, sealed] : view.shares) (*out->mutable_shares())[from] = Bytes(sealed);
  out->set_masked_received(view.masked_received);
  for (uint32_t m : view.unmask.survivors) out->add_survivors(m);
  for (uint32_t m : view.unmask.dropped) out->add_dropped(m);
  out->set_abort_reason(view.abort_reason);
  out->set_retry_after_ms(static_cast<uint32_t>(std::max<int64_t>(0, view.retry_after_ms)));
}

Result<secagg::View> SecAggViewFromProto(const v1::SecAggReply& in) {
  secagg::View view;
  if (in.stage() < v1::SecAggReply::ADVERTISE || in.stage() > v1::SecAggReply::ABORTED) {
    return InvalidArgumentError("secagg: an answer with an unknown stage " + std::to_string(in.stage()));
  }
  view.stage = static_cast<secagg::Server::Stage>(static_cast<int>(in.stage()));
  view.answered = in.answered();
  if (in.has_setup()) {
    const v1::SecAggSetup& p = in.setup();
    secagg::Setup s;
    s.params.round = p.binding();
    s.member = p.member();
    s.params.members.assign(p.members().begin(), p.members().end());
    s.params.degree = p.degree();
    s.params.threshold = p.threshold();
    s.params.graph_seed = p.graph_seed();
    s.params.length = p.length();
    s.clip = p.clip();
    s.weight_cap = p.weight_cap();
    s.l2_clip = p.l2_clip();
    s.noise_std = p.noise_std();
    view.setup = std::move(s);
  }
  for (const v1::SecAggKeyAdvert& a : in.adverts()) {
    PLEXUS_ASSIGN_OR_RETURN(secagg::KeyAdvert advert, AdvertFromProto(a));
    view.adverts.push_back(advert);
  }
  for (const auto& [from, sealed] : in.shares()) view.shares[from] = Vec(sealed);
  view.masked_received = in.masked_received();
  view.unmask.survivors.assign(in.survivors().begin(), in.survivors().end());
  view.unmask.dropped.assign(in.dropped().begin(), in.dropped().end());
  view.abort_reason = in.abort_reason();
  view.retry_after_ms = in.retry_after_ms();
  return view;
}

}  // namespace plexus
