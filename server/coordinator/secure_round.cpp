#include "server/coordinator/secure_round.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "aggregators/aggregator.h"
#include "aggregators/strategy_spec.h"

namespace plexus {

Result<SecAggSettings> SecAggSettings::Parse(const std::string& spec) {
  PLEXUS_ASSIGN_OR_RETURN(StrategySpec s, StrategySpec::Parse(spec.empty() ? "secagg" : "secagg:" + spec));
  SecAggSettings out;
  PLEXUS_ASSIGN_OR_RETURN(const int64_t degree, s.GetCount("degree", 0));
  PLEXUS_ASSIGN_OR_RETURN(const int64_t threshold, s.GetCount("threshold", 0));
  PLEXUS_ASSIGN_OR_RETURN(const double clip, s.GetDouble("clip", std::nan("")));  // NaN: not given
  out.clip_given = !std::isnan(clip);
  if (out.clip_given) out.clip = clip;
  PLEXUS_ASSIGN_OR_RETURN(out.weight_cap, s.GetCount("weight-cap", out.weight_cap));
  PLEXUS_ASSIGN_OR_RETURN(out.stage_s, s.GetDouble("stage-s", out.stage_s));
  PLEXUS_ASSIGN_OR_RETURN(out.spare, s.GetCount("spare", out.spare));
  PLEXUS_ASSIGN_OR_RETURN(out.input_s, s.GetDouble("input-s", out.input_s));
  PLEXUS_RETURN_IF_ERROR(s.CheckAllUsed());
  if (degree > 100000 || threshold > 100000) return InvalidArgumentError("--secagg: degree and threshold up to 100000");
  out.degree = static_cast<int>(degree);
  out.threshold = static_cast<int>(threshold);
  if (out.degree == 1 || out.degree % 2 != 0) {
    return InvalidArgumentError("--secagg: degree=" + std::to_string(degree) +
                                " must be even (each member is joined to degree/2 on either side of a ring)");
  }
  if (out.threshold == 1) return InvalidArgumentError("--secagg: threshold must be at least 2");
  if (out.degree > 0 && out.threshold > out.degree) {
    return InvalidArgumentError("--secagg: threshold=" + std::to_string(threshold) + " exceeds degree=" +
                                std::to_string(degree) + ": a member has only degree holders of its shares");
  }
  if (!(out.clip > 0) || !std::isfinite(out.clip)) return InvalidArgumentError("--secagg: clip must be positive");
  if (out.weight_cap < 1) return InvalidArgumentError("--secagg: weight-cap must be at least 1 example");
  if (!(out.stage_s >= 0 && out.stage_s <= 86400))
    return InvalidArgumentError("--secagg: stage-s must lie in [0, 86400]");
  if (!(out.input_s >= 0 && out.input_s <= 86400))
    return InvalidArgumentError("--secagg: input-s must lie in [0, 86400]");
  return out;
}

Result<std::pair<int, int>> SecAggSettings::GraphFor(int n) const {
  if (n < 3)
    return InvalidArgumentError("secure aggregation needs at least 3 clients in a round, not " + std::to_string(n));
  int d = degree;
  if (d == 0) d = 2 * static_cast<int>(std::ceil(std::log2(static_cast<double>(n))));
  d = std::min(d, n - 1);  // n − 1: everyone, of either parity
  const int t = threshold ? threshold : std::max(2, d / 2 + 1);
  if (t > d) {
    return InvalidArgumentError("--secagg threshold=" + std::to_string(t) + " cannot be met by a round of " +
                                std::to_string(n) + " clients (each has " + std::to_string(d) +
                                " neighbours): lower it or sample more clients");
  }
  return std::pair<int, int>{d, t};
}

std::string SecAggSettings::Describe() const {
  std::ostringstream out;
  out << "threshold=" << (threshold ? std::to_string(threshold) : "degree/2+1")
      << ",degree=" << (degree ? std::to_string(degree) : "2*ceil(log2 n)") << ",clip=" << clip
      << ",weight-cap=" << weight_cap << ",stage-s=";
  if (stage_s > 0) {
    out << stage_s;
  } else {
    out << "30";
  }
  if (spare >= 0) out << ",spare=" << spare;
  if (input_s > 0) out << ",input-s=" << input_s;
  return out.str();
}

Status CheckSecureStrategy(const SecAggSettings& settings, const std::string& spec, const Aggregator& merge) {
  PLEXUS_ASSIGN_OR_RETURN(StrategySpec parsed, StrategySpec::Parse(spec));
  Result<bool> summed = parsed.GetBool("summed", false);
  Result<bool> noised = parsed.GetBool("noised_by_members", false);
  const bool sums = parsed.name() == "dp_fedavg" && summed.ok() && *summed;
  const bool members_noise = sums && noised.ok() && *noised;
  if (members_noise != (settings.member_noise > 0)) {
    return InvalidArgumentError(members_noise ? "dp_fedavg with noised_by_members=true adds no noise: the members of "
                                                "secure groups must (--dp distributed with --secagg)"
                                              : "the members of secure groups add the noise (--dp distributed): the "
                                                "strategy must add none (dp_fedavg with noised_by_members=true)");
  }
  if (settings.l2_clip > 0 && !sums) {
    return InvalidArgumentError(
        "central DP over secure aggregation adds its noise to each group's sum: the strategy "
        "must be dp_fedavg with summed=true (what --dp central makes with --secagg), not " +
        merge.Describe());
  }
  if (settings.l2_clip == 0 && sums) {
    return InvalidArgumentError(
        "dp_fedavg with summed=true folds secure groups' sums of deltas their members "
        "clipped: it needs --secagg with --dp central");
  }
  if (settings.l2_clip == 0 && !merge.takes_the_mean()) {
    return InvalidArgumentError("--secagg with strategy " + merge.Describe() +
                                ": the server sees only each group's weighted mean, which the averaging strategies "
                                "(fedavg, fedavgm, fedadam, fedyogi, fedadagrad) merge without clipping; robust and "
                                "clipping strategies need each update (for DP with it: --dp central, or --dp local "
                                "on the clients)");
  }
  return Status::Ok();
}

Result<std::unique_ptr<SecureRound>> SecureRound::Start(const SecAggSettings& settings, uint64_t binding, uint64_t seed,
                                                        const std::vector<std::string>& clients,
                                                        const ModelState& layout, int64_t now_ms,
                                                        int64_t input_stage_ms, ThreadPool* pool) {
  std::vector<std::string> sorted = clients;
  std::sort(sorted.begin(), sorted.end());
  PLEXUS_ASSIGN_OR_RETURN(const auto graph, settings.GraphFor(static_cast<int>(sorted.size())));
  secagg::Setup setup;
  setup.params.round = binding;
  setup.params.degree = graph.first;
  setup.params.threshold = graph.second;
  setup.params.graph_seed = seed;
  setup.params.length = layout.num_params() + 1;
  setup.clip = settings.clip;
  setup.weight_cap = settings.weight_cap;
  setup.l2_clip = settings.l2_clip;
  setup.noise_std = settings.member_noise * settings.l2_clip / std::sqrt(static_cast<double>(graph.second));
  std::map<std::string, uint32_t> member_of;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto id = static_cast<uint32_t>(i + 1);
    setup.params.members.push_back(id);
    member_of[sorted[i]] = id;
  }
  PLEXUS_ASSIGN_OR_RETURN(secagg::WeightedEncoding encoding, secagg::WeightedEncoding::For(setup));
  const int64_t stage_ms = std::min<int64_t>(input_stage_ms, settings.StageMs());
  PLEXUS_ASSIGN_OR_RETURN(
      std::unique_ptr<secagg::Server> server,
      secagg::Server::Create(setup.params, now_ms, std::max<int64_t>(1, stage_ms), pool, input_stage_ms));
  // Members waiting for the next stage ask again this often: quick enough that a stage's latency
  // is not the poll's, rare enough to stay far below the door's request rate.
  const int64_t retry_ms = 100;
  return std::unique_ptr<SecureRound>(
      new SecureRound(std::move(setup), std::move(encoding), std::move(server), std::move(member_of), retry_ms));
}

secagg::View SecureRound::ViewFor(uint32_t member, bool with_setup) const {
  secagg::View v;
  if (with_setup) {
    v.setup = setup_;
    v.setup->member = member;
  }
  v.stage = server_->stage();
  const std::vector<uint32_t>& expected = server_->expected();
  const bool expected_now = std::binary_search(expected.begin(), expected.end(), member);
  v.answered = server_->Answered(member);
  // The stage's material only to a member that still needs it: members waiting for the next
  // stage ask every retry_ms, and would otherwise fetch their neighbours' keys or shares each time.
  switch (v.stage) {
    case secagg::Server::Stage::kShareKeys:
      if (!v.answered) v.adverts = server_->AdvertsFor(member);
      break;
    case secagg::Server::Stage::kMaskedInput:
      if (!v.answered) v.shares = server_->SharesFor(member);
      if (auto it = masked_.find(member); it != masked_.end()) v.masked_received = it->second.size();
      break;
    case secagg::Server::Stage::kUnmask:
      if (expected_now) v.unmask = server_->UnmaskRequestFor(member);
      break;
    case secagg::Server::Stage::kAborted:
      v.abort_reason = server_->abort_reason();
      break;
    default:
      break;
  }
  v.retry_after_ms = retry_ms_;
  return v;
}

Result<secagg::View> SecureRound::Exchange(const std::string& client_id, const secagg::Call& call, int64_t now_ms) {
  auto it = member_of_.find(client_id);
  if (it == member_of_.end()) {
    return NotFoundError("client '" + client_id + "' is not a member of this round's secure aggregation group");
  }
  const uint32_t member = it->second;
  server_->Tick(now_ms);
  switch (call.kind) {
    case secagg::Call::Kind::kQuery:
      break;
    case secagg::Call::Kind::kAdvert: {
      secagg::KeyAdvert advert = call.advert;
      advert.from = member;  // the caller's proven identity, not what it claims
      PLEXUS_RETURN_IF_ERROR(server_->Receive(advert, now_ms));
      break;
    }
    case secagg::Call::Kind::kShares: {
      secagg::SealedShares shares = call.shares;
      shares.from = member;
      PLEXUS_RETURN_IF_ERROR(server_->Receive(shares, now_ms));
      break;
    }
    case secagg::Call::Kind::kMaskedChunk: {
      if (server_->stage() != secagg::Server::Stage::kMaskedInput) {
        return FailedPreconditionError("secagg: a masked input from " + client_id + " while the round is at " +
                                       secagg::StageName(server_->stage()) + " (late, early or replayed)");
      }
      if (server_->Answered(member)) {
        return InvalidArgumentError("secagg: a second masked input from " + client_id);
      }
      std::vector<uint32_t>& held = masked_[member];
      const uint64_t length = setup_.params.length;
      if (call.offset != held.size()) {
        return FailedPreconditionError("secagg: a masked chunk from " + client_id + " at value " +
                                       std::to_string(call.offset) + ", the server holds " +
                                       std::to_string(held.size()) + " (resume from there)");
      }
      if (call.values.empty() || call.values.size() > secagg::kMaxChunkValues ||
          call.offset + call.values.size() > length) {
        return InvalidArgumentError("secagg: a masked chunk of " + std::to_string(call.values.size()) + " values at " +
                                    std::to_string(call.offset) + " from " + client_id + " does not fit the round's " +
                                    std::to_string(length) + " values (at most " +
                                    std::to_string(secagg::kMaxChunkValues) + " per chunk)");
      }
      held.insert(held.end(), call.values.begin(), call.values.end());
      if (held.size() == length) {
        secagg::MaskedInput input{member, std::move(held)};
        masked_.erase(member);
        PLEXUS_RETURN_IF_ERROR(server_->Receive(input, now_ms));
      }
      break;
    }
    case secagg::Call::Kind::kRevealed: {
      secagg::RevealedShares revealed = call.revealed;
      revealed.from = member;
      PLEXUS_RETURN_IF_ERROR(server_->Receive(revealed, now_ms));
      break;
    }
  }
  if (server_->stage() != secagg::Server::Stage::kMaskedInput) masked_.clear();  // the stage closed
  return ViewFor(member, call.want_setup);
}

bool SecureRound::Joinable(const std::string& client_id) const {
  auto it = member_of_.find(client_id);
  return it != member_of_.end() && server_->stage() == secagg::Server::Stage::kAdvertise &&
         !server_->Answered(it->second);
}

std::vector<std::string> SecureRound::included() const {
  std::vector<std::string> out;
  const std::vector<uint32_t>& in = server_->included();
  for (const auto& [client, member] : member_of_) {
    if (std::binary_search(in.begin(), in.end(), member)) out.push_back(client);
  }
  return out;
}

Result<Update> SecureRound::MeanUpdate(const ModelState& base, const std::string& task_id) const {
  return Decoded(base, task_id, /*sum=*/false);
}

Result<Update> SecureRound::SumUpdate(const ModelState& base, const std::string& task_id) const {
  return Decoded(base, task_id, /*sum=*/true);
}

Result<Update> SecureRound::Decoded(const ModelState& base, const std::string& task_id, bool sum) const {
  if (server_->stage() != secagg::Server::Stage::kDone) {
    return FailedPreconditionError("secagg: the round has no sum yet");
  }
  const auto inputs = static_cast<int64_t>(server_->included().size());
  PLEXUS_ASSIGN_OR_RETURN(secagg::WeightedEncoding::Mean mean, encoding_.DecodeMean(server_->sum(), inputs));
  if (mean.delta.size() != base.num_params()) return InvalidArgumentError("secagg: the sum has another layout");
  Update u;
  u.client_id = "secure-aggregation";
  u.task_id = task_id;
  u.base_version = base.version();
  u.num_examples =
      sum ? inputs : std::max<int64_t>(1, std::llround(mean.total_weight * static_cast<double>(setup_.weight_cap)));
  u.delta = ModelState::UninitializedLike(base);
  const double scale = sum ? mean.total_weight : 1.0;
  for (size_t i = 0; i < mean.delta.size(); ++i) {
    u.delta.data()[i] = static_cast<float>(static_cast<double>(mean.delta[i]) * scale);
  }
  return u;
}

}  // namespace plexus
