#include "privacy/secagg.h"

#include <openssl/rand.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>

#include "core/rng.h"

namespace plexus::secagg {
namespace {

constexpr size_t kIdBytes = 4;

void PutId(std::vector<uint8_t>* out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t GetId(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 | static_cast<uint32_t>(p[2]) << 16 |
         static_cast<uint32_t>(p[3]) << 24;
}

// What a sealed pair of shares is bound to: the protocol, the round, sender and recipient.
std::vector<uint8_t> Aad(uint64_t round, uint32_t from, uint32_t to) {
  std::vector<uint8_t> aad = {'p', 'l', 'e', 'x', 'u', 's', '-', 's', 'e', 'c', 'a', 'g', 'g'};
  PutId(&aad, static_cast<uint32_t>(round));
  PutId(&aad, static_cast<uint32_t>(round >> 32));
  PutId(&aad, from);
  PutId(&aad, to);
  return aad;
}

// One key per direction (from → to), so that the two never seal under the same key and nonce.
std::string SealPurpose(uint64_t round, uint32_t from, uint32_t to) {
  return "plexus secagg seal round " + std::to_string(round) + " from " + std::to_string(from) + " to " +
         std::to_string(to);
}
// The same on both sides of a pair.
std::string MaskPurpose(uint64_t round, uint32_t a, uint32_t b) {
  return "plexus secagg mask round " + std::to_string(round) + " pair " + std::to_string(std::min(a, b)) + "-" +
         std::to_string(std::max(a, b));
}

bool Contains(const std::vector<uint32_t>& sorted, uint32_t v) {
  return std::binary_search(sorted.begin(), sorted.end(), v);
}

}  // namespace

Status Params::Validate() const {
  std::set<uint32_t> seen(members.begin(), members.end());
  if (seen.size() != members.size()) return InvalidArgumentError("secagg: a member listed twice");
  if (seen.count(0)) return InvalidArgumentError("secagg: member ids start at 1");
  const int n = static_cast<int>(members.size());
  if (n < 2) return InvalidArgumentError("secagg: a group needs at least two members");
  if (degree < 2 || (degree < n - 1 && degree % 2 != 0)) {
    return InvalidArgumentError("secagg: degree must be even and at least 2, or the group size less one");
  }
  if (threshold < 2 || threshold > std::min(degree, n - 1)) {
    return InvalidArgumentError("secagg: threshold must be at least 2 and at most the degree");
  }
  if (length == 0) return InvalidArgumentError("secagg: inputs of length 0");
  return Status::Ok();
}

std::vector<uint32_t> Neighbours(const Params& params, uint32_t member) {
  std::vector<uint32_t> ring = params.members;
  std::sort(ring.begin(), ring.end());
  const size_t n = ring.size();
  if (static_cast<size_t>(params.degree) >= n - 1) {
    ring.erase(std::find(ring.begin(), ring.end(), member));
    return ring;
  }
  Rng rng(params.graph_seed ^ 0x5ecA99ULL);
  rng.Shuffle(std::span<uint32_t>(ring));
  const size_t at = static_cast<size_t>(std::find(ring.begin(), ring.end(), member) - ring.begin());
  std::vector<uint32_t> out;
  for (size_t d = 1; d <= static_cast<size_t>(params.degree / 2); ++d) {
    out.push_back(ring[(at + d) % n]);
    out.push_back(ring[(at + n - d) % n]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// --- Member ---

Member::Member(const Params& params, uint32_t self)
    : params_(params), self_(self), neighbours_(Neighbours(params, self)) {}

Result<std::unique_ptr<Member>> Member::Create(const Params& params, uint32_t self) {
  PLEXUS_RETURN_IF_ERROR(params.Validate());
  if (std::find(params.members.begin(), params.members.end(), self) == params.members.end()) {
    return InvalidArgumentError("secagg: member " + std::to_string(self) + " is not in the group");
  }
  return std::unique_ptr<Member>(new Member(params, self));
}

Result<KeyAdvert> Member::Advertise() {
  if (stage_ != 0) return FailedPreconditionError("secagg: keys are advertised once, first");
  PLEXUS_ASSIGN_OR_RETURN(seal_, NewX25519KeyPair());
  PLEXUS_ASSIGN_OR_RETURN(mask_, NewX25519KeyPair());
  if (RAND_priv_bytes(self_seed_.data(), static_cast<int>(self_seed_.size())) != 1) {
    return InternalError("secagg: OpenSSL's generator failed");
  }
  stage_ = 1;
  return KeyAdvert{self_, seal_.public_key, mask_.public_key};
}

Result<SealedShares> Member::ShareKeys(std::span<const KeyAdvert> adverts) {
  if (stage_ != 1) return FailedPreconditionError("secagg: keys are shared once, after advertising");
  for (const KeyAdvert& a : adverts) {
    if (a.from != self_ && Contains(neighbours_, a.from)) advertised_[a.from] = a;
  }
  if (static_cast<int>(advertised_.size()) < params_.threshold) {
    return FailedPreconditionError("secagg: only " + std::to_string(advertised_.size()) +
                                   " neighbours advertised keys, fewer than the threshold " +
                                   std::to_string(params_.threshold));
  }
  std::vector<uint32_t> to;
  for (const auto& [id, advert] : advertised_) to.push_back(id);
  PLEXUS_ASSIGN_OR_RETURN(std::vector<ShamirShare> key_shares, ShamirSplit(mask_.private_key, params_.threshold, to));
  PLEXUS_ASSIGN_OR_RETURN(std::vector<ShamirShare> seed_shares, ShamirSplit(self_seed_, params_.threshold, to));
  SealedShares out{self_, {}};
  for (size_t i = 0; i < to.size(); ++i) {
    std::vector<uint8_t> plain;
    PutId(&plain, self_);
    PutId(&plain, to[i]);
    plain.insert(plain.end(), key_shares[i].y.begin(), key_shares[i].y.end());
    plain.insert(plain.end(), seed_shares[i].y.begin(), seed_shares[i].y.end());
    PLEXUS_ASSIGN_OR_RETURN(Secret32 key, AgreeKey(seal_.private_key, advertised_[to[i]].seal_key,
                                                   SealPurpose(params_.round, self_, to[i])));
    PLEXUS_ASSIGN_OR_RETURN(out.to[to[i]], Seal(key, 0, Aad(params_.round, self_, to[i]), plain));
  }
  stage_ = 2;
  return out;
}

Result<MaskedInput> Member::MaskInput(std::span<const uint32_t> input,
                                      const std::map<uint32_t, std::vector<uint8_t>>& received) {
  if (stage_ != 2) return FailedPreconditionError("secagg: the input is masked once, after sharing keys");
  if (input.size() != params_.length) {
    return InvalidArgumentError("secagg: an input of " + std::to_string(input.size()) + " values, the round takes " +
                                std::to_string(params_.length));
  }
  std::map<uint32_t, Held> held;
  for (const auto& [from, sealed] : received) {
    auto advert = advertised_.find(from);
    if (advert == advertised_.end()) {
      return InvalidArgumentError("secagg: shares from " + std::to_string(from) + ", not an advertised neighbour");
    }
    PLEXUS_ASSIGN_OR_RETURN(
        Secret32 key, AgreeKey(seal_.private_key, advert->second.seal_key, SealPurpose(params_.round, from, self_)));
    PLEXUS_ASSIGN_OR_RETURN(std::vector<uint8_t> plain, Open(key, 0, Aad(params_.round, from, self_), sealed));
    if (plain.size() != 2 * kIdBytes + 2 * kShamirShareBytes || GetId(plain.data()) != from ||
        GetId(plain.data() + kIdBytes) != self_) {
      return InvalidArgumentError("secagg: the shares from " + std::to_string(from) +
                                  " are not addressed to this member");
    }
    const uint8_t* y = plain.data() + 2 * kIdBytes;
    held[from] = Held{ShamirShare{self_, std::vector<uint8_t>(y, y + kShamirShareBytes)},
                      ShamirShare{self_, std::vector<uint8_t>(y + kShamirShareBytes, y + 2 * kShamirShareBytes)}};
  }
  MaskedInput out{self_, std::vector<uint32_t>(input.begin(), input.end())};
  PLEXUS_RETURN_IF_ERROR(AddMask(out.values, self_seed_, +1));
  for (const auto& [other, h] : held) {
    PLEXUS_ASSIGN_OR_RETURN(Secret32 pair, AgreeKey(mask_.private_key, advertised_[other].mask_key,
                                                    MaskPurpose(params_.round, self_, other)));
    PLEXUS_RETURN_IF_ERROR(AddMask(out.values, pair, self_ < other ? +1 : -1));
  }
  held_ = std::move(held);
  stage_ = 3;
  return out;
}

Result<RevealedShares> Member::Unmask(const UnmaskRequest& request) {
  if (stage_ == 4)
    return PermissionDeniedError("secagg: shares are revealed once a round; a second request is refused");
  if (stage_ != 3) return FailedPreconditionError("secagg: shares are revealed after the masked input");
  std::vector<uint32_t> survivors = request.survivors, dropped = request.dropped;
  std::sort(survivors.begin(), survivors.end());
  std::sort(dropped.begin(), dropped.end());
  for (uint32_t id : dropped) {
    if (Contains(survivors, id)) {
      return PermissionDeniedError("secagg: member " + std::to_string(id) +
                                   " is named both survivor and dropped: revealing both its secrets would unmask its "
                                   "input; refused");
    }
  }
  if (!Contains(survivors, self_)) {
    return PermissionDeniedError("secagg: this member is not among the survivors; refused");
  }
  if (static_cast<int>(survivors.size()) < params_.threshold) {
    return PermissionDeniedError("secagg: " + std::to_string(survivors.size()) +
                                 " survivors, fewer than the threshold");
  }
  RevealedShares out{self_, {}, {}};
  for (const auto& [id, h] : held_) {
    if (Contains(survivors, id)) out.self_seed[id] = h.self_seed;
    if (Contains(dropped, id)) out.mask_key[id] = h.mask_key;
  }
  stage_ = 4;
  return out;
}

std::string StageName(Server::Stage s) {
  switch (s) {
    case Server::Stage::kAdvertise:
      return "advertise keys";
    case Server::Stage::kShareKeys:
      return "share keys";
    case Server::Stage::kMaskedInput:
      return "masked input";
    case Server::Stage::kUnmask:
      return "unmask";
    case Server::Stage::kDone:
      return "done";
    case Server::Stage::kAborted:
      return "aborted";
  }
  return "?";
}

// --- Server ---

Server::Server(const Params& params, int64_t now_ms, int64_t stage_ms, ThreadPool* pool, int64_t input_stage_ms)
    : params_(params),
      stage_ms_(stage_ms),
      input_stage_ms_(input_stage_ms > 0 ? input_stage_ms : stage_ms),
      pool_(pool),
      deadline_ms_(now_ms + stage_ms),
      expected_(params.members) {
  std::sort(expected_.begin(), expected_.end());
  for (uint32_t m : expected_) graph_[m] = Neighbours(params_, m);
}

Result<std::unique_ptr<Server>> Server::Create(const Params& params, int64_t now_ms, int64_t stage_ms, ThreadPool* pool,
                                               int64_t input_stage_ms) {
  PLEXUS_RETURN_IF_ERROR(params.Validate());
  if (stage_ms <= 0) return InvalidArgumentError("secagg: a stage must last some time");
  if (input_stage_ms < 0) return InvalidArgumentError("secagg: a stage must last some time");
  return std::unique_ptr<Server>(new Server(params, now_ms, stage_ms, pool, input_stage_ms));
}

Status Server::Admit(Stage stage, uint32_t from, int64_t now_ms) {
  Tick(now_ms);
  if (stage_ != stage) {
    return FailedPreconditionError("secagg: a " + StageName(stage) + " message from " + std::to_string(from) +
                                   " while the round is at " + StageName(stage_) + " (late, early or replayed)");
  }
  if (!Contains(expected_, from)) {
    return InvalidArgumentError("secagg: member " + std::to_string(from) + " is not expected at " + StageName(stage));
  }
  if (answered_.count(from)) {
    return InvalidArgumentError("secagg: a second " + StageName(stage) + " message from " + std::to_string(from));
  }
  return Status::Ok();
}

Status Server::Receive(const KeyAdvert& advert, int64_t now_ms) {
  PLEXUS_RETURN_IF_ERROR(Admit(Stage::kAdvertise, advert.from, now_ms));
  adverts_[advert.from] = advert;
  answered_[advert.from] = true;
  MaybeClose(now_ms);
  return Status::Ok();
}

Status Server::Receive(const SealedShares& shares, int64_t now_ms) {
  PLEXUS_RETURN_IF_ERROR(Admit(Stage::kShareKeys, shares.from, now_ms));
  // Exactly one sealed pair for each neighbour that advertised.
  std::vector<uint32_t> want;
  for (uint32_t n : graph_.at(shares.from)) {
    if (adverts_.count(n)) want.push_back(n);
  }
  std::vector<uint32_t> got;
  for (const auto& [to, sealed] : shares.to) got.push_back(to);
  if (got != want) {
    return InvalidArgumentError("secagg: member " + std::to_string(shares.from) +
                                " sent shares for other members than its advertised neighbours");
  }
  shares_[shares.from] = shares;
  answered_[shares.from] = true;
  MaybeClose(now_ms);
  return Status::Ok();
}

Status Server::Receive(const MaskedInput& input, int64_t now_ms) {
  PLEXUS_RETURN_IF_ERROR(Admit(Stage::kMaskedInput, input.from, now_ms));
  if (input.values.size() != params_.length) {
    return InvalidArgumentError("secagg: a masked input of " + std::to_string(input.values.size()) + " values from " +
                                std::to_string(input.from) + ", the round takes " + std::to_string(params_.length));
  }
  if (sum_.empty()) sum_.assign(params_.length, 0);
  for (size_t i = 0; i < sum_.size(); ++i) sum_[i] += input.values[i];  // only the running sum is kept
  answered_[input.from] = true;
  MaybeClose(now_ms);
  return Status::Ok();
}

Status Server::Receive(const RevealedShares& revealed, int64_t now_ms) {
  PLEXUS_RETURN_IF_ERROR(Admit(Stage::kUnmask, revealed.from, now_ms));
  // Only shares the sender holds: of its neighbours that shared keys with it, as requested.
  auto holds = [&](uint32_t owner) {
    auto it = shares_.find(owner);
    return it != shares_.end() && it->second.to.count(revealed.from) > 0;
  };
  // Survivors' self seeds and dropped members' mask keys, each of an owner the sender holds.
  auto check = [&](const std::map<uint32_t, ShamirShare>& shares, const std::vector<uint32_t>& asked,
                   const char* secret) -> Status {
    for (const auto& [owner, share] : shares) {
      if (!Contains(asked, owner) || !holds(owner) || share.x != revealed.from) {
        return InvalidArgumentError("secagg: " + std::to_string(revealed.from) + " revealed a share of " +
                                    std::to_string(owner) + "'s " + secret + " it was not asked for or does not hold");
      }
    }
    return Status::Ok();
  };
  PLEXUS_RETURN_IF_ERROR(check(revealed.self_seed, survivors_, "self seed"));
  PLEXUS_RETURN_IF_ERROR(check(revealed.mask_key, dropped_, "mask key"));
  revealed_[revealed.from] = revealed;
  answered_[revealed.from] = true;
  MaybeClose(now_ms);
  return Status::Ok();
}

void Server::Tick(int64_t now_ms) {
  if (stage_ == Stage::kDone || stage_ == Stage::kAborted) return;
  if (now_ms >= deadline_ms_) Close(now_ms);
}

void Server::MaybeClose(int64_t now_ms) {
  if (answered_.size() == expected_.size()) Close(now_ms);
}

void Server::Abort(std::string why) {
  stage_ = Stage::kAborted;
  abort_reason_ = std::move(why);
  sum_.clear();
}

void Server::Close(int64_t now_ms) {
  std::vector<uint32_t> answered;
  for (const auto& [id, yes] : answered_) answered.push_back(id);
  if (static_cast<int>(answered.size()) < params_.threshold) {
    Abort("secagg: only " + std::to_string(answered.size()) + " of " + std::to_string(expected_.size()) +
          " members answered the " + StageName(stage_) + " stage, fewer than the threshold " +
          std::to_string(params_.threshold));
    return;
  }
  const Stage closing = stage_;
  answered_.clear();
  deadline_ms_ = now_ms + (closing == Stage::kShareKeys ? input_stage_ms_ : stage_ms_);
  switch (closing) {
    case Stage::kAdvertise:
      stage_ = Stage::kShareKeys;
      expected_ = answered;
      break;
    case Stage::kShareKeys:
      stage_ = Stage::kMaskedInput;
      expected_ = answered;
      break;
    case Stage::kMaskedInput:
      survivors_ = answered;
      for (uint32_t m : expected_) {
        if (!Contains(survivors_, m)) dropped_.push_back(m);
      }
      stage_ = Stage::kUnmask;
      expected_ = answered;
      break;
    case Stage::kUnmask: {
      const auto began = std::chrono::steady_clock::now();
      Unmask();
      unmask_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - began).count();
      break;
    }
    default:
      break;
  }
}

std::vector<KeyAdvert> Server::AdvertsFor(uint32_t member) const {
  std::vector<KeyAdvert> out;
  if (stage_ != Stage::kShareKeys || !graph_.count(member)) return out;
  for (uint32_t n : graph_.at(member)) {
    if (auto it = adverts_.find(n); it != adverts_.end()) out.push_back(it->second);
  }
  return out;
}

std::map<uint32_t, std::vector<uint8_t>> Server::SharesFor(uint32_t member) const {
  std::map<uint32_t, std::vector<uint8_t>> out;
  if (stage_ != Stage::kMaskedInput) return out;
  for (const auto& [from, s] : shares_) {
    if (auto it = s.to.find(member); it != s.to.end()) out[from] = it->second;
  }
  return out;
}

UnmaskRequest Server::UnmaskRequestFor(uint32_t member) const {
  UnmaskRequest r;
  if (stage_ != Stage::kUnmask || !graph_.count(member)) return r;
  r.survivors = survivors_;
  r.dropped = dropped_;
  return r;
}

void Server::Unmask() {
  // One job per secret: a survivor's self seed (its mask comes off), or a dropped member's mask
  // key (the pairwise masks it left in its surviving neighbours' inputs come off). Jobs run on the
  // pool, each range of them into its own accumulator of masks to take away.
  struct Job {
    uint32_t owner;
    bool dropped;
  };
  // A dropped member's job expands a mask per surviving neighbour, a survivor's one: the dropped
  // are spread evenly through the list, so that the pool's contiguous ranges weigh alike.
  std::vector<Job> jobs;
  size_t next_dropped = 0;
  for (size_t i = 0; i < survivors_.size(); ++i) {
    while (next_dropped < dropped_.size() && next_dropped * survivors_.size() <= i * dropped_.size()) {
      jobs.push_back({dropped_[next_dropped++], true});
    }
    jobs.push_back({survivors_[i], false});
  }
  while (next_dropped < dropped_.size()) jobs.push_back({dropped_[next_dropped++], true});
  auto recover = [&](uint32_t owner, bool self_seed) -> Result<Secret32> {
    std::vector<ShamirShare> pieces;
    for (const auto& [from, r] : revealed_) {
      const auto& kind = self_seed ? r.self_seed : r.mask_key;
      if (auto it = kind.find(owner); it != kind.end()) pieces.push_back(it->second);
    }
    return ShamirRecover(pieces, params_.threshold);
  };
  // Adds to `acc` what is to be subtracted from the sum for `job`.
  auto run = [&](const Job& job, std::vector<uint32_t>& acc) -> Status {
    if (!job.dropped) {
      Result<Secret32> seed = recover(job.owner, true);
      if (!seed.ok()) {
        return FailedPreconditionError("secagg: the self mask of " + std::to_string(job.owner) +
                                       " cannot be removed: " + std::string(seed.status().message()));
      }
      return AddMask(acc, *seed, +1);
    }
    Result<Secret32> key = recover(job.owner, false);
    Result<X25519KeyPair> pair = key.ok() ? X25519FromPrivate(*key) : Result<X25519KeyPair>(key.status());
    if (!pair.ok() || pair->public_key != adverts_.at(job.owner).mask_key) {
      return FailedPreconditionError(
          "secagg: the mask key of dropped member " + std::to_string(job.owner) + " cannot be recovered" +
          (pair.ok() ? " (the shares give another key)" : ": " + std::string(pair.status().message())));
    }
    // Survivors that had the dropped member's shares added ± the mask they agree on with it.
    for (uint32_t s : survivors_) {
      if (!shares_.at(job.owner).to.count(s)) continue;
      PLEXUS_ASSIGN_OR_RETURN(Secret32 pairwise, AgreeKey(pair->private_key, adverts_.at(s).mask_key,
                                                          MaskPurpose(params_.round, s, job.owner)));
      PLEXUS_RETURN_IF_ERROR(AddMask(acc, pairwise, s < job.owner ? +1 : -1));
    }
    return Status::Ok();
  };
  std::mutex mu;
  Status failed = Status::Ok();
  std::vector<std::vector<uint32_t>> partials;
  auto range = [&](size_t begin, size_t end) {
    std::vector<uint32_t> acc(params_.length, 0);
    for (size_t j = begin; j < end; ++j) {
      if (Status s = run(jobs[j], acc); !s.ok()) {
        std::lock_guard<std::mutex> lock(mu);
        if (failed.ok()) failed = s;
        return;
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    partials.push_back(std::move(acc));
  };
  if (pool_ && jobs.size() > 1) {
    pool_->ParallelFor(jobs.size(), range, 1);
  } else {
    range(0, jobs.size());
  }
  if (!failed.ok()) {
    Abort(std::string(failed.message()));
    return;
  }
  for (const std::vector<uint32_t>& acc : partials) {
    for (size_t i = 0; i < sum_.size(); ++i) sum_[i] -= acc[i];  // mod 2^32: the order does not matter
  }
  revealed_.clear();
  stage_ = Stage::kDone;
}

}  // namespace plexus::secagg
