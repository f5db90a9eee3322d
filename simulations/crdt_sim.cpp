#include "simulations/crdt_sim.h"

#include <algorithm>
#include <memory>

#include "core/rng.h"
#include "crdt/crdt_replica.h"

namespace plexus {
namespace {

constexpr int64_t kMaxGossipRounds = 500;

ModelState Layout() { return *ModelState::Create({{"w", {64, 32}}, {"b", {32}}}); }

// One event: contribution `index` reaches `replica`, or (retract) the replica retracts it.
struct Event {
  size_t replica = 0;
  size_t index = 0;
  bool retract = false;
};

}  // namespace

Result<std::vector<CrdtOrdering>> RunCrdtSimulation(const CrdtSimOptions& o,
                                                    const std::function<void(const CrdtOrdering&)>& on_ordering) {
  if (o.replicas < 2) return InvalidArgumentError("--crdt-replicas must be at least 2");
  if (o.orderings < 1) return InvalidArgumentError("--orderings must be at least 1");
  if (o.contributions < 2) return InvalidArgumentError("--crdt-contributions must be at least 2");
  if (o.strategies.empty()) return InvalidArgumentError("no strategies to resolve");

  // The authors, their keys and their signed contributions: the same in every ordering.
  AuthorKeys keys;
  std::vector<Contribution> contributions;
  for (int64_t a = 0; a < o.contributions; ++a) {
    Rng rng = Rng::Derive(o.seed, 0xa0000 + static_cast<uint64_t>(a));
    std::string seed(32, '\0');
    for (char& ch : seed) ch = static_cast<char>(rng.Below(256));
    PLEXUS_ASSIGN_OR_RETURN(SigningKey key, SigningKey::FromSeed(seed));
    Contribution c;
    c.author = "author-" + std::to_string(a);
    c.examples = 10 + static_cast<int64_t>(rng.Below(90));
    c.created_round = 1;
    c.delta = Layout();
    for (float& x : c.delta.data()) x = static_cast<float>(rng.Normal() * 0.01);
    PLEXUS_RETURN_IF_ERROR(Sign(c, key));
    keys.Add(c.author, key.public_key());
    contributions.push_back(std::move(c));
  }
  const ModelState base = Layout();
  const auto n = static_cast<size_t>(o.replicas);

  std::vector<CrdtOrdering> results;
  for (int64_t k = 0; k < o.orderings; ++k) {
    Rng rng = Rng::Derive(o.seed, static_cast<uint64_t>(k));
    std::vector<std::unique_ptr<CrdtReplica>> replicas;
    for (size_t r = 0; r < n; ++r) replicas.push_back(std::make_unique<CrdtReplica>("replica-" + std::to_string(r), &keys));

    // Each contribution reaches one to three replicas directly, some twice (duplicates), in a
    // random order; everything else arrives by gossip.
    std::vector<Event> events;
    for (size_t c = 0; c < contributions.size(); ++c) {
      const size_t copies = 1 + rng.Below(3);
      for (size_t i = 0; i < copies; ++i) events.push_back({rng.Below(n), c, false});
      if (rng.Below(2) == 0) events.push_back(events.back());
    }
    rng.Shuffle(std::span<Event>(events));
    // Contribution 1 is retracted by the first replica to get it, and later re-added elsewhere
    // (by a replica that may not have seen the retraction yet): the re-add must survive.
    // Contribution 0 is found poisoned once everyone has it, and retracted by a random replica.
    const size_t first1 = static_cast<size_t>(
        std::find_if(events.begin(), events.end(), [](const Event& e) { return e.index == 1; }) - events.begin());
    const size_t retracting = events[first1].replica;
    events.insert(events.begin() + static_cast<ptrdiff_t>(first1 + 1), Event{retracting, 1, true});
    std::vector<Event> after_convergence = {{rng.Below(n), 0, true}};
    events.push_back({(retracting + 1 + rng.Below(n - 1)) % n, 1, false});

    CrdtOrdering result;
    result.ordering = k;
    size_t next_event = 0;
    bool converged = false;
    const int64_t partition_rounds = o.partition_heal ? 10 : 0;
    for (int64_t round = 0;; ++round) {
      // Delays: a few deliveries per round, interleaved with gossip.
      for (size_t d = 0; d < 3 && next_event < events.size(); ++d, ++next_event) {
        const Event& e = events[next_event];
        if (e.retract) {
          (void)replicas[e.replica]->Retract(contributions[e.index].Id());  // NotFound if already gone
        } else {
          PLEXUS_RETURN_IF_ERROR(replicas[e.replica]->Add(contributions[e.index]).status());
        }
      }
      // Gossip: every replica pulls from one random peer (inside its half while partitioned).
      const bool partitioned = round < partition_rounds;
      for (size_t r = 0; r < n; ++r) {
        size_t peer;
        if (partitioned) {
          const size_t half = n / 2, lo = r < half ? 0 : half, size = r < half ? half : n - half;
          if (size < 2) continue;
          peer = lo + (r - lo + 1 + rng.Below(size - 1)) % size;
        } else {
          peer = (r + 1 + rng.Below(n - 1)) % n;
        }
        PLEXUS_ASSIGN_OR_RETURN(size_t hashes, replicas[r]->SyncFrom(*replicas[peer]));
        result.node_hashes += static_cast<int64_t>(hashes);
      }
      result.gossip_rounds = round + 1;
      if (next_event < events.size() || partitioned) continue;
      const std::string digest = replicas[0]->StateDigest();
      converged = true;
      for (const auto& r : replicas) converged = converged && r->StateDigest() == digest;
      if (converged && !after_convergence.empty()) {
        events.insert(events.end(), after_convergence.begin(), after_convergence.end());
        after_convergence.clear();
        continue;
      }
      if (converged) break;
      if (round >= kMaxGossipRounds) break;  // reported as not identical below
    }

    result.identical = converged;
    for (const std::string& strategy : o.strategies) {
      PLEXUS_ASSIGN_OR_RETURN(ModelState first, replicas[0]->Resolve(strategy, base));
      const std::string hash = first.ContentSha256();
      result.hashes.push_back(hash);
      for (size_t r = 1; r < n; ++r) {
        PLEXUS_ASSIGN_OR_RETURN(ModelState merged, replicas[r]->Resolve(strategy, base));
        result.identical = result.identical && merged.ContentSha256() == hash;
      }
    }
    result.live = static_cast<int64_t>(replicas[0]->LiveIds().size());
    if (on_ordering) on_ordering(result);
    results.push_back(std::move(result));
  }
  return results;
}

}  // namespace plexus
