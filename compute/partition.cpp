#include "compute/partition.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <numeric>

#include "core/rng.h"

namespace plexus {
namespace {

Result<double> ParseNumber(std::string_view text, std::string_view what) {
  std::string s(text);
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    return InvalidArgumentError("partition " + std::string(what) + " '" + s + "' is not a number");
  }
  return v;
}

std::vector<std::vector<uint32_t>> Iid(size_t n, int64_t clients, Rng& rng) {
  std::vector<uint32_t> all(n);
  std::iota(all.begin(), all.end(), 0u);
  rng.Shuffle(std::span<uint32_t>(all));
  std::vector<std::vector<uint32_t>> out(static_cast<size_t>(clients));
  for (size_t c = 0; c < out.size(); ++c) {
    const size_t b = n * c / out.size(), e = n * (c + 1) / out.size();
    out[c].assign(all.begin() + static_cast<ptrdiff_t>(b), all.begin() + static_cast<ptrdiff_t>(e));
  }
  return out;
}

Result<std::vector<std::vector<uint32_t>>> Dirichlet(const std::vector<uint8_t>& labels, double alpha, int64_t clients,
                                                     Rng& rng) {
  const size_t n = labels.size();
  const auto k = static_cast<size_t>(clients);
  std::vector<std::vector<uint32_t>> by_class(256);
  for (uint32_t i = 0; i < n; ++i) by_class[labels[i]].push_back(i);
  const size_t min_size = std::min<size_t>(10, n / k);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::vector<std::vector<uint32_t>> out(k);
    for (auto& members : by_class) {
      if (members.empty()) continue;
      std::vector<uint32_t> idx = members;
      rng.Shuffle(std::span<uint32_t>(idx));
      std::vector<double> p(k);
      double total = 0;
      for (size_t c = 0; c < k; ++c) {
        // A client that already holds its fair share takes no more (NIID-Bench's balancing).
        p[c] = out[c].size() < n / k ? rng.Gamma(alpha) : 0.0;
        total += p[c];
      }
      if (total <= 0) {
        for (double& x : p) x = 1.0;
        total = static_cast<double>(k);
      }
      double cumulative = 0;
      size_t begin = 0;
      for (size_t c = 0; c < k; ++c) {
        cumulative += p[c] / total;
        const size_t end = c + 1 == k ? idx.size() : std::min(idx.size(), static_cast<size_t>(cumulative * idx.size()));
        out[c].insert(out[c].end(), idx.begin() + static_cast<ptrdiff_t>(begin),
                      idx.begin() + static_cast<ptrdiff_t>(end));
        begin = std::max(begin, end);
      }
    }
    const bool all_big_enough =
        std::all_of(out.begin(), out.end(), [&](const auto& v) { return v.size() >= std::max<size_t>(min_size, 1); });
    if (all_big_enough) {
      for (auto& v : out) std::sort(v.begin(), v.end());
      return out;
    }
  }
  return InvalidArgumentError("dirichlet partition: could not give every one of " + std::to_string(clients) +
                              " clients at least " + std::to_string(min_size) +
                              " examples; raise alpha or lower the client count");
}

Result<std::vector<std::vector<uint32_t>>> Shards(const std::vector<uint8_t>& labels, int64_t per_client,
                                                  int64_t clients, Rng& rng) {
  const size_t n = labels.size();
  const auto total = static_cast<size_t>(per_client * clients);
  if (total > n) {
    return InvalidArgumentError("shards partition: " + std::to_string(total) + " shards do not fit in " +
                                std::to_string(n) + " examples");
  }
  std::vector<uint32_t> sorted(n);
  std::iota(sorted.begin(), sorted.end(), 0u);
  std::stable_sort(sorted.begin(), sorted.end(), [&](uint32_t a, uint32_t b) { return labels[a] < labels[b]; });
  std::vector<size_t> order(total);
  std::iota(order.begin(), order.end(), size_t{0});
  rng.Shuffle(std::span<size_t>(order));
  std::vector<std::vector<uint32_t>> out(static_cast<size_t>(clients));
  for (size_t s = 0; s < total; ++s) {
    const size_t shard = order[s];
    const size_t b = n * shard / total, e = n * (shard + 1) / total;
    auto& dst = out[s / static_cast<size_t>(per_client)];
    dst.insert(dst.end(), sorted.begin() + static_cast<ptrdiff_t>(b), sorted.begin() + static_cast<ptrdiff_t>(e));
  }
  for (auto& v : out) std::sort(v.begin(), v.end());
  return out;
}

}  // namespace

Result<PartitionSpec> PartitionSpec::Parse(std::string_view text) {
  PartitionSpec spec;
  const size_t colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const std::string_view arg = colon == std::string_view::npos ? std::string_view() : text.substr(colon + 1);
  if (name == "iid" && colon == std::string_view::npos) return spec;
  if (name == "dirichlet" && !arg.empty()) {
    spec.kind = Kind::kDirichlet;
    PLEXUS_ASSIGN_OR_RETURN(spec.alpha, ParseNumber(arg, "alpha"));
    if (spec.alpha <= 0) return InvalidArgumentError("dirichlet alpha must be positive");
    return spec;
  }
  if (name == "shards" && !arg.empty()) {
    spec.kind = Kind::kShards;
    PLEXUS_ASSIGN_OR_RETURN(double s, ParseNumber(arg, "shard count"));
    // Beyond 2^31 shards per client no data set could fill them; the bound also keeps the cast defined.
    if (s < 1 || s != std::floor(s) || s > 2147483647.0) {
      return InvalidArgumentError("shards per client must be an integer from 1 to 2147483647");
    }
    spec.shards = static_cast<int64_t>(s);
    return spec;
  }
  return InvalidArgumentError("unknown partition '" + std::string(text) + "' (use iid, dirichlet:ALPHA or shards:S)");
}

std::string PartitionSpec::ToString() const {
  switch (kind) {
    case Kind::kIid:
      return "iid";
    case Kind::kDirichlet: {
      std::string a = std::to_string(alpha);
      a.erase(a.find_last_not_of('0') + 1);
      if (a.back() == '.') a.pop_back();
      return "dirichlet:" + a;
    }
    case Kind::kShards:
      return "shards:" + std::to_string(shards);
  }
  return "iid";
}

Result<std::vector<std::vector<uint32_t>>> PartitionIndices(const std::vector<uint8_t>& labels,
                                                            const PartitionSpec& spec, int64_t num_clients,
                                                            uint64_t seed) {
  if (num_clients <= 0) return InvalidArgumentError("number of partitions must be positive");
  if (static_cast<size_t>(num_clients) > labels.size()) {
    return InvalidArgumentError("cannot split " + std::to_string(labels.size()) + " examples among " +
                                std::to_string(num_clients) + " clients");
  }
  Rng rng = Rng::Derive(seed, 0x9a17);
  switch (spec.kind) {
    case PartitionSpec::Kind::kIid:
      return Iid(labels.size(), num_clients, rng);
    case PartitionSpec::Kind::kDirichlet:
      return Dirichlet(labels, spec.alpha, num_clients, rng);
    case PartitionSpec::Kind::kShards:
      return Shards(labels, spec.shards, num_clients, rng);
  }
  return InvalidArgumentError("unknown partition kind");
}

Result<SampledPartition> SampledPartition::Make(const std::vector<uint8_t>& labels, const PartitionSpec& spec,
                                                int64_t examples, uint64_t seed) {
  if (labels.empty()) return InvalidArgumentError("cannot sample partitions from an empty data set");
  if (examples <= 0) return InvalidArgumentError("examples per client must be positive");
  SampledPartition p;
  p.spec_ = spec;
  p.examples_ = examples;
  p.seed_ = seed;
  uint8_t max_label = 0;
  for (uint8_t y : labels) max_label = std::max(max_label, y);
  p.label_begin_.assign(size_t{max_label} + 2, 0);
  for (uint8_t y : labels) ++p.label_begin_[size_t{y} + 1];
  for (size_t c = 1; c < p.label_begin_.size(); ++c) p.label_begin_[c] += p.label_begin_[c - 1];
  p.by_label_.resize(labels.size());
  std::vector<size_t> next(p.label_begin_.begin(), p.label_begin_.end() - 1);
  for (size_t i = 0; i < labels.size(); ++i) p.by_label_[next[labels[i]]++] = static_cast<uint32_t>(i);
  return p;
}

std::vector<uint32_t> SampledPartition::For(uint64_t client) const {
  Rng rng = Rng::Derive(seed_ ^ 0x5a3b1edULL, client);
  const size_t k = static_cast<size_t>(examples_);
  const size_t n = by_label_.size();
  std::vector<uint32_t> out;
  out.reserve(k);
  switch (spec_.kind) {
    case PartitionSpec::Kind::kIid:
      for (size_t i = 0; i < k; ++i) out.push_back(static_cast<uint32_t>(rng.Below(n)));
      break;
    case PartitionSpec::Kind::kDirichlet: {
      const size_t classes = label_begin_.size() - 1;
      std::vector<double> cumulative(classes);
      double total = 0.0;
      for (size_t c = 0; c < classes; ++c) {
        const bool present = label_begin_[c + 1] > label_begin_[c];
        total += present ? rng.Gamma(spec_.alpha) : 0.0;
        cumulative[c] = total;
      }
      for (size_t i = 0; i < k; ++i) {
        // A tiny alpha can round every draw to zero: fall back to uniform over the data then.
        size_t c = 0;
        if (total > 0) {
          const double u = rng.Uniform() * total;
          c = static_cast<size_t>(std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin());
          c = std::min(c, classes - 1);
          while (label_begin_[c + 1] == label_begin_[c]) c = (c + 1) % classes;
          out.push_back(by_label_[label_begin_[c] + rng.Below(label_begin_[c + 1] - label_begin_[c])]);
        } else {
          out.push_back(static_cast<uint32_t>(rng.Below(n)));
        }
      }
      break;
    }
    case PartitionSpec::Kind::kShards: {
      const size_t shards = static_cast<size_t>(std::max<int64_t>(1, spec_.shards));
      const size_t shard_len = std::max<size_t>(1, std::min(n, k / shards));
      for (size_t s = 0; s < shards && out.size() < k; ++s) {
        const size_t start = rng.Below(n - shard_len + 1);
        for (size_t j = 0; j < shard_len && out.size() < k; ++j) out.push_back(by_label_[start + j]);
      }
      while (out.size() < k) out.push_back(by_label_[rng.Below(n)]);  // k not a multiple of S
      break;
    }
  }
  return out;
}

}  // namespace plexus
