#include "gossip/protocol/topology.h"

#include <algorithm>
#include <cmath>

#include "aggregators/strategy_spec.h"
#include "core/rng.h"

namespace plexus::gossip {
namespace {

Status TopologyError(const std::string& what) { return InvalidArgumentError("--topology: " + what); }

// ceil(log2 n) for n >= 2: the number of distinct hops 2^k < n.
size_t HopCount(size_t n) {
  size_t k = 0;
  while ((size_t{1} << k) < n) ++k;
  return k;
}

// True when the undirected graph of adjacency lists is connected (breadth-first from node 0).
bool Connected(const std::vector<std::vector<uint32_t>>& adj) {
  std::vector<bool> seen(adj.size(), false);
  std::vector<uint32_t> queue{0};
  seen[0] = true;
  for (size_t head = 0; head < queue.size(); ++head) {
    for (uint32_t v : adj[queue[head]]) {
      if (!seen[v]) {
        seen[v] = true;
        queue.push_back(v);
      }
    }
  }
  return queue.size() == adj.size();
}

// A uniformly paired random d-regular simple graph (Steger-Wormald: pair random free stubs that
// make no loop or double edge; start over when stuck), redrawn until connected.
Result<std::vector<std::vector<uint32_t>>> RandomRegular(size_t n, size_t d, uint64_t seed) {
  Rng rng = Rng::Derive(seed, 0x7e6a1a6ULL);
  for (int attempt = 0; attempt < 200; ++attempt) {
    std::vector<std::vector<uint32_t>> adj(n);
    std::vector<uint32_t> stubs;
    stubs.reserve(n * d);
    for (size_t i = 0; i < n; ++i) stubs.insert(stubs.end(), d, static_cast<uint32_t>(i));
    bool stuck = false;
    while (!stubs.empty() && !stuck) {
      stuck = true;
      for (int tries = 0; tries < 200; ++tries) {
        const size_t a = rng.Below(stubs.size()), b = rng.Below(stubs.size());
        const uint32_t u = stubs[a], v = stubs[b];
        if (u == v || std::find(adj[u].begin(), adj[u].end(), v) != adj[u].end()) continue;
        adj[u].push_back(v);
        adj[v].push_back(u);
        // Remove both stubs: the larger index first, so the smaller one stays valid.
        for (size_t k : {std::max(a, b), std::min(a, b)}) {
          stubs[k] = stubs.back();
          stubs.pop_back();
        }
        stuck = false;
        break;
      }
    }
    if (!stuck && Connected(adj)) {
      for (auto& list : adj) std::sort(list.begin(), list.end());
      return adj;
    }
  }
  return TopologyError("could not draw a connected " + std::to_string(d) + "-regular graph on " + std::to_string(n) +
                       " nodes");
}

}  // namespace

const std::vector<std::string>& Topology::Names() {
  static const std::vector<std::string> names{"ring",    "torus",   "exponential", "onepeer-exponential",
                                              "regular", "complete"};
  return names;
}

Result<Topology> Topology::Parse(std::string_view text, size_t n, uint64_t seed) {
  auto parsed = StrategySpec::Parse(text);
  if (!parsed.ok()) return TopologyError(parsed.status().message());
  StrategySpec spec = std::move(parsed).value();
  // N is --clients in the simulator and --num-partitions for peers: the messages say "nodes".
  if (n < 2) return TopologyError("a decentralized federation needs at least 2 nodes");
  const std::string ns = std::to_string(n);
  Topology t;
  t.n_ = n;
  t.spec_ = spec.name();
  const std::string& name = spec.name();
  if (name == "ring") {
    t.kind_ = Kind::kRing;
    if (n < 3) return TopologyError("a ring needs at least 3 nodes, there are " + ns + ": use complete");
  } else if (name == "torus") {
    t.kind_ = Kind::kTorus;
    for (size_t a = 3; a * a <= n; ++a) {
      if (n % a == 0) t.torus_rows_ = a;
    }
    if (t.torus_rows_ == 0) {
      return TopologyError("a torus needs N = a x b nodes with a, b >= 3, there are " + ns + ": use ring or complete");
    }
    t.torus_cols_ = n / t.torus_rows_;
  } else if (name == "exponential" || name == "onepeer-exponential") {
    t.kind_ = name == "exponential" ? Kind::kExponential : Kind::kOnePeerExponential;
    for (size_t k = 0; k < HopCount(n); ++k) t.offsets_.push_back(static_cast<uint32_t>(size_t{1} << k));
  } else if (name == "regular") {
    t.kind_ = Kind::kRegular;
    auto d_or = spec.GetCount("d", 4);
    if (!d_or.ok()) return TopologyError(d_or.status().message());
    const auto d = static_cast<size_t>(*d_or);
    if (d < 1 || d >= n) {
      return TopologyError("regular:d=" + std::to_string(d) + " needs 1 <= d < N nodes, there are " + ns + ": use " +
                           (n > 2 ? std::string("regular:d=2 or complete") : std::string("complete")) +
                           ", or more nodes");
    }
    if ((n * d) % 2 != 0) {
      return TopologyError("regular:d=" + std::to_string(d) + " needs N x d even, there are " + ns +
                           " nodes: use an even d, or an even number of nodes");
    }
    if (d == 1 && n > 2) return TopologyError("regular:d=1 is disconnected for N > 2 (use d >= 2)");
    PLEXUS_ASSIGN_OR_RETURN(auto adj, RandomRegular(n, d, seed));
    t.begin_.reserve(n + 1);
    for (const auto& list : adj) {
      t.begin_.push_back(static_cast<uint32_t>(t.adj_.size()));
      t.adj_.insert(t.adj_.end(), list.begin(), list.end());
    }
    t.begin_.push_back(static_cast<uint32_t>(t.adj_.size()));
    t.spec_ = "regular:d=" + std::to_string(d);
  } else if (name == "complete") {
    t.kind_ = Kind::kComplete;
  } else {
    std::string known;
    for (const std::string& k : Names()) known += (known.empty() ? "" : ", ") + k;
    return TopologyError("unknown topology '" + name + "' (known: " + known + "; regular takes d=D)");
  }
  if (Status s = spec.CheckAllUsed(); !s.ok()) return TopologyError(s.message());
  return t;
}

void Topology::Out(uint32_t i, uint64_t round, std::vector<uint32_t>* out) const {
  out->clear();
  const auto n = static_cast<uint32_t>(n_);
  switch (kind_) {
    case Kind::kRing:
      out->push_back((i + n - 1) % n);
      out->push_back((i + 1) % n);
      break;
    case Kind::kTorus: {
      const auto rows = static_cast<uint32_t>(torus_rows_), cols = static_cast<uint32_t>(torus_cols_);
      const uint32_t r = i / cols, c = i % cols;
      out->push_back(((r + rows - 1) % rows) * cols + c);
      out->push_back(((r + 1) % rows) * cols + c);
      out->push_back(r * cols + (c + cols - 1) % cols);
      out->push_back(r * cols + (c + 1) % cols);
      break;
    }
    case Kind::kExponential:
      for (uint32_t hop : offsets_) out->push_back((i + hop) % n);
      break;
    case Kind::kOnePeerExponential:
      out->push_back((i + offsets_[round % offsets_.size()]) % n);
      break;
    case Kind::kRegular:
      out->assign(adj_.begin() + begin_[i], adj_.begin() + begin_[i + 1]);
      break;
    case Kind::kComplete:
      for (uint32_t j = 0; j < n; ++j) {
        if (j != i) out->push_back(j);
      }
      break;
  }
  // Small graphs fold onto themselves (a torus 3 wide lists the same neighbour twice).
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

void Topology::In(uint32_t i, uint64_t round, std::vector<uint32_t>* out) const {
  if (!directed()) return Out(i, round, out);
  out->clear();
  const auto n = static_cast<uint32_t>(n_);
  if (kind_ == Kind::kExponential) {
    for (uint32_t hop : offsets_) out->push_back((i + n - hop) % n);
  } else {
    out->push_back((i + n - offsets_[round % offsets_.size()]) % n);
  }
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
}

size_t Topology::Degree(uint32_t i) const {
  switch (kind_) {
    case Kind::kComplete:
      return n_ - 1;
    case Kind::kRegular:
      return begin_[i + 1] - begin_[i];
    case Kind::kOnePeerExponential:
      return 1;
    default: {
      std::vector<uint32_t> out;
      Out(i, 0, &out);
      return out.size();
    }
  }
}

std::vector<double> Topology::MixingMatrix(uint64_t round) const {
  std::vector<double> w(n_ * n_, 0.0);
  std::vector<uint32_t> in;
  for (uint32_t i = 0; i < n_; ++i) {
    In(i, round, &in);
    double self = 1.0;
    for (uint32_t j : in) {
      const double wij = directed() ? 1.0 / static_cast<double>(in.size() + 1)
                                    : 1.0 / static_cast<double>(1 + std::max(Degree(i), Degree(j)));
      w[i * n_ + j] = wij;
      self -= wij;
    }
    w[i * n_ + i] = self;
  }
  return w;
}

double SpectralGap(const std::vector<double>& w, size_t n) {
  // A = W^T W is symmetric with eigenvalues sigma_k^2; cyclic Jacobi rotations diagonalize it.
  std::vector<double> a(n * n, 0.0);
  for (size_t i = 0; i < n; ++i) {
    for (size_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (size_t k = 0; k < n; ++k) s += w[k * n + i] * w[k * n + j];
      a[i * n + j] = s;
    }
  }
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) off += a[p * n + q] * a[p * n + q];
    }
    if (off < 1e-22) break;
    for (size_t p = 0; p < n; ++p) {
      for (size_t q = p + 1; q < n; ++q) {
        const double apq = a[p * n + q];
        if (std::abs(apq) < 1e-300) continue;
        const double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (size_t k = 0; k < n; ++k) {  // rotate rows and columns p and q
          const double akp = a[k * n + p], akq = a[k * n + q];
          a[k * n + p] = c * akp - s * akq;
          a[k * n + q] = s * akp + c * akq;
        }
        for (size_t k = 0; k < n; ++k) {
          const double apk = a[p * n + k], aqk = a[q * n + k];
          a[p * n + k] = c * apk - s * aqk;
          a[q * n + k] = s * apk + c * aqk;
        }
      }
    }
  }
  std::vector<double> sigma(n);
  for (size_t i = 0; i < n; ++i) sigma[i] = std::sqrt(std::max(0.0, a[i * n + i]));
  std::sort(sigma.begin(), sigma.end(), std::greater<>());
  return n < 2 ? 1.0 : 1.0 - sigma[1];
}

}  // namespace plexus::gossip
