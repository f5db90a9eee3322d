// Laws every strategy must keep, checked on random inputs (rapidcheck).
#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <algorithm>
#include <initializer_list>

#include "aggregators/registry.h"
#include "core/rng.h"

namespace plexus {
namespace {

struct Input {
  std::vector<std::string> ids;
  std::vector<std::vector<float>> deltas;
  std::vector<int64_t> examples;
};

// n updates of `dims` coordinates. Values are multiples of 1/8 below 64 and example counts are
// small, so every weighted sum is exact and streaming strategies must agree bit for bit too.
Input RandomInput(Rng& rng, size_t n, size_t dims) {
  Input in;
  for (size_t i = 0; i < n; ++i) {
    in.ids.push_back("client-" + std::to_string(1000 + i));
    std::vector<float> d(dims);
    for (float& x : d) x = static_cast<float>(static_cast<int64_t>(rng.Below(1024)) - 512) / 8.0f;
    in.deltas.push_back(d);
    in.examples.push_back(1 + static_cast<int64_t>(rng.Below(8)));
  }
  return in;
}

// Input i as an update against `base`.
Update UpdateOf(const Input& in, size_t i, const ModelState& base) {
  Update u;
  u.client_id = in.ids[i];
  u.task_id = "t";
  u.num_examples = in.examples[i];
  // Powers of two: FedNova divides by the steps, and 1/3 would make its sums inexact, and so
  // order-dependent in their last bit (a seed found it after 87 cases).
  u.local_steps = int64_t{1} << (i % 3);
  u.delta = base;
  std::copy(in.deltas[i].begin(), in.deltas[i].end(), u.delta.data().begin());
  return u;
}

ModelState Run(const std::string& spec, const Input& in, const std::vector<size_t>& order) {
  auto agg = *MakeAggregator(spec, nullptr);
  ModelState base = *ModelState::Create({{"w", {static_cast<int64_t>(in.deltas[0].size())}}});
  RC_ASSERT(agg->Begin(base).ok());
  for (size_t i : order) RC_ASSERT(agg->Fold(UpdateOf(in, i, base)).ok());
  Result<ModelState> out = agg->Finalize();
  RC_ASSERT(out.ok());
  return *out;
}

const std::vector<std::string> kStrategies = {"fedavg",
                                              "fedavg_exact",
                                              "fedavg:weighted=false",
                                              "fedavgm",
                                              "fednova",
                                              "fedadam",
                                              "krum:f=1",
                                              "multikrum:f=1",
                                              "median",
                                              "trimmed_mean:beta=0.2",
                                              "bulyan:f=1",
                                              "geomed",
                                              "centered_clip:tau=5",
                                              "norm_bound:max=median"};

// Neither the order of the updates nor the path (folds one by one, or one Aggregate) changes a bit.
RC_GTEST_PROP(AggregatorLaws, PermutationInvariant, ()) {
  const auto strategy = *rc::gen::elementOf(kStrategies);
  const auto n = *rc::gen::inRange<size_t>(7, 12);
  const auto dims = *rc::gen::inRange<size_t>(1, 40);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  const Input in = RandomInput(rng, n, dims);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const ModelState a = Run(strategy, in, order);
  rng.Shuffle(std::span<size_t>(order));
  const ModelState b = Run(strategy, in, order);
  RC_ASSERT(a.ContentSha256() == b.ContentSha256());
  // Aggregate over a batch the caller holds (robust rules keep views of the updates, not copies)
  // publishes the same bits; the same aggregator over other values then publishes theirs.
  const ModelState base = *ModelState::Create({{"w", {static_cast<int64_t>(dims)}}});
  std::vector<Update> updates;
  for (size_t i : order) updates.push_back(UpdateOf(in, i, base));
  std::vector<const Update*> batch;
  for (const Update& u : updates) batch.push_back(&u);
  auto agg = *MakeAggregator(strategy, nullptr);
  Result<ModelState> aggregated = agg->Aggregate(base, batch);
  RC_ASSERT(aggregated.ok());
  RC_ASSERT(aggregated->ContentSha256() == a.ContentSha256());
  Input half = in;
  for (std::vector<float>& d : half.deltas) {
    for (float& x : d) x *= 0.5f;
  }
  for (Update& u : updates) u.delta.Scale(0.5f);
  Result<ModelState> again = agg->Aggregate(base, batch);
  RC_ASSERT(again.ok());
  // Against the same two rounds folded one by one (server optimizers keep state between rounds).
  auto folding = *MakeAggregator(strategy, nullptr);
  for (const Input* round : std::initializer_list<const Input*>{&in, &half}) {
    RC_ASSERT(folding->Begin(base).ok());
    for (size_t i : order) RC_ASSERT(folding->Fold(UpdateOf(*round, i, base)).ok());
    Result<ModelState> out = folding->Finalize();
    RC_ASSERT(out.ok());
    if (round == &half) RC_ASSERT(out->ContentSha256() == again->ContentSha256());
  }
}

// FoldShared may hold updates and fold them four per pass (the averaging family); the result is
// bit for bit FoldScaled's, one at a time, with Fold and FoldScaled calls mixed in, and
// num_folded counts held updates.
RC_GTEST_PROP(AggregatorLaws, FoldSharedEqualsFoldScaled, ()) {
  const auto strategy = *rc::gen::elementOf(kStrategies);
  const auto n = *rc::gen::inRange<size_t>(7, 14);
  const auto dims = *rc::gen::inRange<size_t>(1, 40);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  const Input in = RandomInput(rng, n, dims);
  const ModelState base = *ModelState::Create({{"w", {static_cast<int64_t>(dims)}}});
  auto update = [&](size_t i) { return UpdateOf(in, i, base); };
  std::vector<double> scales(n);
  std::vector<bool> shared(n);
  for (size_t i = 0; i < n; ++i) {
    scales[i] = 1.0 / static_cast<double>(int64_t{1} << rng.Below(3));  // powers of two: exact sums
    shared[i] = rng.Below(4) != 0;
  }
  auto one_by_one = *MakeAggregator(strategy, nullptr);
  auto held = *MakeAggregator(strategy, nullptr);
  RC_ASSERT(one_by_one->Begin(base).ok());
  RC_ASSERT(held->Begin(base).ok());
  for (size_t i = 0; i < n; ++i) {
    Update a = update(i);
    RC_ASSERT(one_by_one->FoldScaled(a, scales[i]).ok());
    if (shared[i]) {
      RC_ASSERT(held->FoldShared(std::make_shared<Update>(update(i)), scales[i]).ok());
    } else {
      Update b = update(i);
      RC_ASSERT(held->FoldScaled(b, scales[i]).ok());
    }
    RC_ASSERT(held->num_folded() == one_by_one->num_folded());
  }
  Result<ModelState> a = one_by_one->Finalize();
  Result<ModelState> b = held->Finalize();
  RC_ASSERT(a.ok());
  RC_ASSERT(b.ok());
  RC_ASSERT(a->ContentSha256() == b->ContentSha256());
}

RC_GTEST_PROP(AggregatorLaws, RobustRulesStayWithinTheHonestRange, ()) {
  const auto strategy = *rc::gen::elementOf(std::vector<std::string>{"median", "trimmed_mean:beta=0.25", "bulyan:f=2"});
  const size_t f = 2;
  const auto n = *rc::gen::inRange<size_t>(11, 16);
  const auto dims = *rc::gen::inRange<size_t>(1, 30);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  Input in = RandomInput(rng, n, dims);
  for (size_t i = 0; i < f; ++i) {  // Byzantine inputs: huge values
    for (float& x : in.deltas[rng.Below(n)]) x = (rng.Below(2) ? 1e6f : -1e6f);
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const ModelState out = Run(strategy, in, order);
  for (size_t j = 0; j < dims; ++j) {
    float lo = 1e30f, hi = -1e30f;
    for (const auto& d : in.deltas) {
      if (std::abs(d[j]) < 1e5f) {
        lo = std::min(lo, d[j]);
        hi = std::max(hi, d[j]);
      }
    }
    RC_ASSERT(out.data()[j] >= lo - 1e-4f);
    RC_ASSERT(out.data()[j] <= hi + 1e-4f);
  }
}

RC_GTEST_PROP(AggregatorLaws, KrumChoosesAnHonestInput, ()) {
  const size_t f = 2;
  const auto n = *rc::gen::inRange<size_t>(2 * f + 3, 14);
  const auto dims = *rc::gen::inRange<size_t>(1, 30);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  Input in = RandomInput(rng, n, dims);
  std::vector<bool> byzantine(n, false);
  for (size_t i = 0; i < f; ++i) {
    const size_t k = rng.Below(n);
    byzantine[k] = true;
    for (float& x : in.deltas[k]) x = 1e6f;
  }
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const ModelState out = Run("krum:f=2", in, order);
  bool honest = false;
  for (size_t i = 0; i < n; ++i) {
    honest |= !byzantine[i] && std::equal(in.deltas[i].begin(), in.deltas[i].end(), out.data().begin());
  }
  RC_ASSERT(honest);
}

RC_GTEST_PROP(AggregatorLaws, FedAvgOfIdenticalInputsIsThatInput, ()) {
  const auto n = *rc::gen::inRange<size_t>(1, 20);
  const auto dims = *rc::gen::inRange<size_t>(1, 30);
  Rng rng(*rc::gen::arbitrary<uint64_t>());
  Input in = RandomInput(rng, n, dims);
  for (auto& d : in.deltas) d = in.deltas[0];
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  const ModelState out = Run("fedavg", in, order);
  RC_ASSERT(std::equal(in.deltas[0].begin(), in.deltas[0].end(), out.data().begin()));
}

}  // namespace
}  // namespace plexus
