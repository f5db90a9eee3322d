// DP-FTRL: differentially private federated learning that needs no sampling assumption (Kairouz
// et al., ICML 2021; the tree aggregation of Dwork et al. 2010 and Chan et al. 2011): what runs in
// production for devices that arrive when they like, where "a uniform sample of the population"
// cannot be promised.
//
// Version v is leaf t = (v − 1) mod K + 1 of tree ⌊(v − 1) / K⌋ (K = `restart`; 0: one tree for
// the whole federation). Within a tree the clipped sums of the releases add up to a prefix sum
// S_t, and the published model is θ_start + lr·(S_t + N_t) / expected, where N_t is the sum of
// the dyadic tree nodes that cover [1, t], each node's Gaussian noise N(0, (z·C)²) drawn once and
// for all: the noise of a prefix is a sum of at most ⌈log₂(t + 1)⌉ nodes however long the tree,
// where noising every release alone would let it grow like √t. Nodes are never stored: each is a
// keyed stream (AddKeyedNormals) under a secret 256-bit key, so release t adds to θ_{t−1} its
// clipped sum plus N_t − N_{t−1} (the nodes of t drawn, those of t − 1 taken back).
//
// Each client contributes at most `participations` (m) times to one tree: Fold refuses more, and
// MayContribute tells engines whom not to give tasks. The accountant charges each tree
// α·m²·⌈log₂(n + 1)⌉ / (2z²) (a contribution reaches one node per level, and m of them at most
// m·C to a node), which that cap makes true.
//
// Under a tree of aggregators (DP-FTRL at the root): an edge's partial sum (partial_sum_delta.h) is
// checked and folded as dp_fedavg folds one (ClippedSum::FoldPartial: unweighted, norm at most k·C)
// and each client update it lists counts against its client's cap, so a partial must list its k
// contributions. A client is counted by its own id, the last part of its path below the root
// ("edge-a/c0" counts as "c0"): a client that re-attached to another edge stays the same client,
// and two clients of one id under different edges only count as one, which refuses more, never
// less. A partial that would take any of its clients past the cap is refused whole (its sum
// cannot be split); the edges do not see the root's counts, so with few clients and many releases
// per tree a refusal costs an edge's round.
//
// The key comes from OpenSSL's RAND_bytes (or from `seed` in a simulation) and is saved with the
// strategy's state, with the tree and the contributions counted in it: a restarted server takes
// back the very nodes it drew. Whoever reads the server's database can therefore remove the
// noise; the same database holds the clients' updates in the clear (docs/privacy.md).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "aggregators/aggregator.h"
#include "aggregators/clipped_sum.h"
#include "aggregators/dp_release.h"
#include "aggregators/partial_sum_delta.h"
#include "aggregators/server_optimizer.h"
#include "aggregators/strategy_spec.h"
#include "privacy/gaussian_noise.h"

namespace plexus {
namespace {

constexpr char kStateTag[] = "dpftrl1";
// Leaves per tree that node ids can name (26 bits of index, 6 of level, 32 of tree).
constexpr uint64_t kMaxLeaves = uint64_t{1} << 26;

struct FtrlSettings : DpRelease {
  int64_t restart = 0;         // releases per tree; 0: never restarted
  int64_t participations = 1;  // contributions of one client to one tree
};

// The dyadic nodes whose sum is the prefix [1, t]: (level, index), node (l, j) covering leaves
// j·2^l + 1 … (j + 1)·2^l.
std::vector<std::pair<int, uint64_t>> PrefixNodes(uint64_t t) {
  std::vector<std::pair<int, uint64_t>> nodes;
  uint64_t before = 0;
  for (int level = 63; level >= 0; --level) {
    if (t >> level & 1) {
      nodes.emplace_back(level, before >> level);
      before += uint64_t{1} << level;
    }
  }
  return nodes;
}

class DpFtrl final : public Aggregator {
 public:
  DpFtrl(FtrlSettings s, ThreadPool* pool, NoiseKey key)
      : s_(s), pool_(pool), sum_(pool), step_(MakePlainStep(s.lr)), key_(key) {}

  Status Begin(const ModelState& base) override {
    base_ = base;
    sum_.Reset(base);
    pending_.clear();
    EnterTree(TreeOf(base.version()));
    begun_ = true;
    return Status::Ok();
  }

  Status Fold(const Update& u) override { return FoldTimes(u, 1.0); }
  Status FoldScaled(Update& u, double value_scale) override { return FoldTimes(u, std::min(value_scale, 1.0)); }
  Status FoldAll(std::span<const Update* const> updates) override {
    if (std::any_of(updates.begin(), updates.end(), [](const Update* u) { return PartialSumOf(*u) != nullptr; })) {
      for (const Update* u : updates) PLEXUS_RETURN_IF_ERROR(FoldTimes(*u, 1.0));
      return Status::Ok();
    }
    size_t admitted = 0;
    Status refused = Status::Ok();
    for (; admitted < updates.size(); ++admitted) {
      refused = Admit(*updates[admitted]).status();
      if (!refused.ok()) break;
    }
    const size_t before = sum_.count();
    Status folded = sum_.FoldAll(updates.first(admitted), s_.clip, "dp_ftrl");
    // Those the sum refused (its first refused and every later one) give back their place.
    for (size_t i = sum_.count() - before; i < admitted; ++i) Release(ClientOf(updates[i]->client_id));
    return folded.ok() ? refused : folded;
  }
  bool folds_coded() const override { return true; }
  bool takes_partial_sums() const override { return true; }
  // Client updates folded (a partial sum's count them all).
  size_t num_folded() const override { return sum_.count(); }

  bool MayContribute(const std::string& client_id, uint64_t base_version) const override {
    if (TreeOf(base_version) != tree_) return true;  // a new tree: nobody has contributed yet
    return Contributions(ClientOf(client_id)) < s_.participations;
  }

  Result<ModelState> Finalize() override {
    if (!begun_ || sum_.count() == 0) return FailedPreconditionError("dp_ftrl: no updates to aggregate");
    begun_ = false;  // also when the noise fails: a partly noised sum must never be released
    const uint64_t version = base_.version() + 1;
    const uint64_t leaf = s_.restart > 0 ? (version - 1) % static_cast<uint64_t>(s_.restart) + 1 : version;
    if (leaf >= kMaxLeaves) {
      return OutOfRangeError("dp_ftrl: a tree of more than 2^26 releases; restart the tree (restart=K)");
    }
    const std::span<double> sum = sum_.mutable_sum();
    if (s_.noise > 0) {
      // N_t − N_{t−1}: the nodes of t that t − 1 lacks are drawn, those it had and t lacks taken back.
      const auto now = PrefixNodes(leaf), before = PrefixNodes(leaf - 1);
      const double stddev = s_.noise * s_.clip;
      for (const auto& node : now) {
        if (std::find(before.begin(), before.end(), node) == before.end())
          PLEXUS_RETURN_IF_ERROR(AddKeyedNormals(sum, stddev, key_, StreamOf(node), pool_));
      }
      for (const auto& node : before) {
        if (std::find(now.begin(), now.end(), node) == now.end())
          PLEXUS_RETURN_IF_ERROR(AddKeyedNormals(sum, -stddev, key_, StreamOf(node), pool_));
      }
    }
    ModelState next = step_->Step(base_, sum, 1.0 / s_.expected, pool_);
    for (const auto& [client, n] : pending_) contributions_[client] += n;
    pending_.clear();
    return next;
  }

  // Tag, key, tree, then each client's contributions to it: length-prefixed id and count.
  std::string SaveState() const override {
    std::string state(kStateTag, sizeof kStateTag);
    state.append(reinterpret_cast<const char*>(key_.data()), key_.size());
    Append(&state, tree_);
    for (const auto& [client, n] : contributions_) {
      Append(&state, client.size());
      state += client;
      Append(&state, static_cast<uint64_t>(n));
    }
    return state;
  }

  Status RestoreState(std::string_view state) override {
    if (state.empty()) return Status::Ok();
    const Status bad = InvalidArgumentError("dp_ftrl: the saved state is not DP-FTRL's");
    if (state.size() < sizeof kStateTag + 32 + 8 || std::memcmp(state.data(), kStateTag, sizeof kStateTag) != 0)
      return bad;
    state.remove_prefix(sizeof kStateTag);
    NoiseKey key;
    std::memcpy(key.data(), state.data(), key.size());
    state.remove_prefix(key.size());
    uint64_t tree = 0;
    if (!Take(&state, &tree)) return bad;
    std::map<std::string, int64_t> contributions;
    while (!state.empty()) {
      uint64_t length = 0, n = 0;
      if (!Take(&state, &length) || state.size() < length) return bad;
      std::string client(state.substr(0, length));
      state.remove_prefix(length);
      if (!Take(&state, &n)) return bad;
      contributions[client] = static_cast<int64_t>(n);
    }
    // Restored before the first Begin, or with it on the same tree: a seeded key must match.
    if (s_.seed && key != key_) return InvalidArgumentError("dp_ftrl: the saved noise key is not this seed's");
    key_ = key;
    tree_ = tree;
    contributions_ = std::move(contributions);
    return Status::Ok();
  }

  std::string Describe() const override {
    char text[256];
    std::snprintf(
        text, sizeof text, "dp_ftrl(clip=%g,noise=%g,expected=%g,restart=%lld,participations=%lld%s)", s_.clip,
        s_.noise, s_.expected, static_cast<long long>(s_.restart), static_cast<long long>(s_.participations),
        s_.seed ? (",noise_source=seeded(seed=" + std::to_string(*s_.seed) + ")").c_str() : ",noise_source=openssl");
    std::string out = text;
    if (s_.lr != 1) out.insert(out.size() - 1, ",lr=" + std::to_string(s_.lr));
    return out;
  }

 private:
  uint64_t TreeOf(uint64_t base_version) const {
    return s_.restart > 0 ? base_version / static_cast<uint64_t>(s_.restart) : 0;
  }
  void EnterTree(uint64_t tree) {
    if (tree == tree_) return;
    tree_ = tree;
    contributions_.clear();
  }
  uint64_t StreamOf(const std::pair<int, uint64_t>& node) const {
    return tree_ << 32 | static_cast<uint64_t>(node.first) << 26 | node.second;
  }
  // The client a contribution counts for: the last part of its path ("edge-a/c0" is "c0").
  static std::string ClientOf(std::string_view path) {
    const size_t slash = path.rfind('/');
    return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
  }
  int64_t Contributions(const std::string& client) const {
    int64_t n = 0;
    if (auto it = contributions_.find(client); it != contributions_.end()) n += it->second;
    if (auto it = pending_.find(client); it != pending_.end()) n += it->second;
    return n;
  }
  // The clients whose places an update takes: its own, or those a partial sum lists.
  static Result<std::vector<std::string>> ClientsOf(const Update& u) {
    const PartialSumDelta* partial = PartialSumOf(u);
    if (partial == nullptr) return std::vector<std::string>{ClientOf(u.client_id)};
    const std::vector<PartialContribution>& listed = partial->contributions();
    if (static_cast<int64_t>(listed.size()) != partial->sum().count()) {
      return InvalidArgumentError("dp_ftrl: the partial sum from " + u.client_id + " lists " +
                                  std::to_string(listed.size()) + " contributions for " +
                                  std::to_string(partial->sum().count()) +
                                  " updates: DP-FTRL counts each client's contributions to a tree, so each must be "
                                  "named");
    }
    std::vector<std::string> clients;
    clients.reserve(listed.size());
    for (const PartialContribution& c : listed) clients.push_back(ClientOf(c.client_path));
    return clients;
  }
  // Takes a place in the tree for each of the update's clients, or refuses it whole; returns them.
  Result<std::vector<std::string>> Admit(const Update& u) {
    if (!begun_) return FailedPreconditionError("dp_ftrl: Fold before Begin");
    PLEXUS_ASSIGN_OR_RETURN(std::vector<std::string> clients, ClientsOf(u));
    for (size_t i = 0; i < clients.size(); ++i) {
      if (Contributions(clients[i]) >= s_.participations) {
        for (size_t j = 0; j < i; ++j) Release(clients[j]);
        return FailedPreconditionError(
            "dp_ftrl: client " + clients[i] +
            (PartialSumOf(u) == nullptr ? "" : " (in the partial sum from " + u.client_id + ")") +
            " already contributed " + std::to_string(s_.participations) +
            " time(s) to this tree of releases, all DP-FTRL's accounting allows; it may contribute again after the "
            "tree restarts");
      }
      ++pending_[clients[i]];
    }
    return clients;
  }
  void Release(const std::string& client) {
    if (auto it = pending_.find(client); it != pending_.end() && --it->second == 0) pending_.erase(it);
  }
  Status FoldTimes(const Update& u, double scale) {
    PLEXUS_ASSIGN_OR_RETURN(const std::vector<std::string> clients, Admit(u));
    const PartialSumDelta* partial = PartialSumOf(u);
    Status folded =
        partial ? sum_.FoldPartial(u, *partial, s_.clip, scale, "dp_ftrl") : sum_.Fold(u, s_.clip, scale, "dp_ftrl");
    if (!folded.ok()) {
      for (const std::string& c : clients) Release(c);
    }
    return folded;
  }
  static void Append(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), sizeof v); }
  static bool Take(std::string_view* in, uint64_t* v) {
    if (in->size() < sizeof *v) return false;
    std::memcpy(v, in->data(), sizeof *v);
    in->remove_prefix(sizeof *v);
    return true;
  }

  const FtrlSettings s_;
  ThreadPool* const pool_;
  ClippedSum sum_;
  std::unique_ptr<ServerOptimizer> step_;
  NoiseKey key_;
  ModelState base_;
  uint64_t tree_ = 0;
  std::map<std::string, int64_t> contributions_;  // to the current tree, by published versions
  std::map<std::string, int64_t> pending_;        // folded since Begin, not yet published
  bool begun_ = false;
};

Status Check(bool ok, const std::string& what) {
  return ok ? Status::Ok() : InvalidArgumentError("strategy 'dp_ftrl': " + what);
}

}  // namespace

Result<std::unique_ptr<Aggregator>> MakeDpFtrl(StrategySpec& spec, ThreadPool* pool) {
  FtrlSettings s;
  PLEXUS_ASSIGN_OR_RETURN(static_cast<DpRelease&>(s), ReadDpRelease(spec, "dp_ftrl"));
  PLEXUS_ASSIGN_OR_RETURN(double restart, spec.GetDouble("restart", 0));
  PLEXUS_ASSIGN_OR_RETURN(double participations, spec.GetDouble("participations", 1));
  PLEXUS_RETURN_IF_ERROR(
      Check(restart >= 0 && restart < static_cast<double>(kMaxLeaves) && restart == std::floor(restart),
            "restart must be a whole number of releases below 2^26 (0: never)"));
  PLEXUS_RETURN_IF_ERROR(Check(participations >= 1 && participations == std::floor(participations),
                               "participations must be a whole number, at least 1"));
  s.restart = static_cast<int64_t>(restart);
  s.participations = static_cast<int64_t>(participations);
  NoiseKey key{};
  if (s.seed) {
    key = NoiseKeyFromSeed(*s.seed, "dp-ftrl");
  } else {
    PLEXUS_ASSIGN_OR_RETURN(key, NewNoiseKey());
  }
  return std::unique_ptr<Aggregator>(std::make_unique<DpFtrl>(s, pool, key));
}

}  // namespace plexus
