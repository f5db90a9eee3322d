#include "simulations/crdt_sim.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "core/rng.h"
#include "crdt/crdt_replica.h"
#include "simulations/event_network.h"

namespace plexus {
namespace {

constexpr double kMaxGossipRounds = 500;
constexpr double kPartitionIntervals = 10;
constexpr uint64_t kHashBytes = 32;
constexpr uint64_t kContributionOverheadBytes = 256;  // author, counters, signature, framing

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
  if (!(o.gossip_interval_ms > 0) || !(o.latency_ms >= 0) || !(o.mbps >= 0)) {
    return InvalidArgumentError("gossip interval must be positive, latency and bandwidth not negative");
  }

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
    for (size_t r = 0; r < n; ++r)
      replicas.push_back(std::make_unique<CrdtReplica>("replica-" + std::to_string(r), &keys));

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
    EventNetwork net;
    for (size_t r = 0; r < n; ++r) net.AddNode({o.latency_ms, o.mbps, o.mbps});
    const double interval = o.gossip_interval_ms;
    Status failure;
    auto fail = [&](const Status& s) {
      if (failure.ok()) failure = s;
      net.Stop();
    };
    // Deliveries: three at the start of every interval, interleaved with gossip.
    size_t next_event = 0;
    auto deliver = [&](size_t i) {
      const Event& e = events[i];
      if (e.retract) {
        (void)replicas[e.replica]->Retract(contributions[e.index].Id());  // NotFound if already gone
      } else if (Status s = replicas[e.replica]->Add(contributions[e.index]).status(); !s.ok()) {
        fail(s);
      }
      next_event = std::max(next_event, i + 1);
    };
    for (size_t i = 0; i < events.size(); ++i) net.After(static_cast<double>(i / 3) * interval, [&, i] { deliver(i); });
    bool healed = !o.partition_heal;
    if (o.partition_heal) {
      std::vector<uint32_t> half(n);
      for (size_t r = 0; r < n; ++r) half[r] = r < n / 2 ? 0 : 1;
      net.Partition(std::move(half));
      net.After(kPartitionIntervals * interval, [&] {
        net.Heal();
        healed = true;
      });
    }
    // Gossip: every interval (from a random phase) a replica sends its digest to a random peer;
    // a peer whose state differs answers with what the sync ships: the digest nodes compared and
    // the contributions the asker lacks, as they stood when the question arrived.
    std::vector<std::function<void()>> gossip(n);
    for (size_t r = 0; r < n; ++r) {
      gossip[r] = [&, r] {
        const size_t peer = (r + 1 + rng.Below(n - 1)) % n;
        net.Send(static_cast<uint32_t>(r), static_cast<uint32_t>(peer), kHashBytes, [&, r, peer] {
          if (replicas[peer]->StateDigest() == replicas[r]->StateDigest()) return;
          auto snapshot = std::make_shared<const CrdtReplica>(*replicas[peer]);
          CrdtReplica probe = *replicas[r];
          Result<size_t> hashes = probe.SyncFrom(*snapshot);
          if (!hashes.ok()) return fail(hashes.status());
          uint64_t bytes = *hashes * kHashBytes;
          for (const auto& [id, c] : probe.contributions()) {
            if (!replicas[r]->Find(id)) bytes += c.delta.num_params() * sizeof(float) + kContributionOverheadBytes;
          }
          net.Send(static_cast<uint32_t>(peer), static_cast<uint32_t>(r), bytes, [&, r, snapshot] {
            Result<size_t> compared = replicas[r]->SyncFrom(*snapshot);
            if (!compared.ok()) return fail(compared.status());
            result.node_hashes += static_cast<int64_t>(*compared);
          });
        });
        net.After(interval, gossip[r]);
      };
      net.After(rng.Uniform() * interval, gossip[r]);
    }
    // Every interval, once everything was delivered and the partition healed: have all replicas
    // the same state? Then the poisoned contribution is retracted, and after the next agreement
    // the run ends.
    bool converged = false;
    std::function<void()> check = [&] {
      if (next_event >= events.size() && healed) {
        const std::string digest = replicas[0]->StateDigest();
        bool same = true;
        for (const auto& r : replicas) same = same && r->StateDigest() == digest;
        if (same && !after_convergence.empty()) {
          for (const Event& e : after_convergence) {
            events.push_back(e);
            deliver(events.size() - 1);
          }
          after_convergence.clear();
        } else if (same) {
          converged = true;
          return net.Stop();
        }
      }
      if (net.now_ms() >= kMaxGossipRounds * interval) return net.Stop();  // reported as not identical
      net.After(interval, check);
    };
    net.After(interval / 2, check);
    net.Run();
    PLEXUS_RETURN_IF_ERROR(failure);
    result.converged_s = net.now_ms() / 1000.0;
    result.gossip_rounds = static_cast<int64_t>(std::ceil(net.now_ms() / interval));
    result.messages = net.messages_delivered();
    result.bytes = net.bytes_delivered();
    result.messages_lost = net.messages_lost();

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
