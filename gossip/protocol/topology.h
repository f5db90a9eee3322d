// Topology: who talks to whom in a decentralized federation (`--topology SPEC`), and the mixing
// weights D-PSGD uses on it. Specs:
//   ring                 each node to i-1 and i+1 (undirected)
//   torus                a x b grid wrapped both ways, a the largest divisor of N with 3 <= a <= sqrt(N)
//   exponential          static exponential graph: i sends to i + 2^k mod N for every 2^k < N (directed)
//   onepeer-exponential  time-varying: at round t, i sends to i + 2^(t mod ceil(log2 N)) only (directed)
//   regular:d=D          a random connected D-regular graph drawn from the seed (undirected)
//   complete             everyone to everyone (Epidemic Learning's random s-out choice draws from it)
// Mixing weights: Metropolis-Hastings (1 / (1 + max(d_i, d_j)) per edge) on undirected graphs,
// uniform 1 / (in-degree + 1) on directed ones; both doubly stochastic on the whole graph.
// Immutable after Parse; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace plexus::gossip {

class Topology {
 public:
  enum class Kind { kRing, kTorus, kExponential, kOnePeerExponential, kRegular, kComplete };

  // The topologies Parse knows, for --help and messages.
  static const std::vector<std::string>& Names();

  // InvalidArgument naming --topology for an unknown spec or one impossible for `n` nodes
  // (e.g. regular:d=5 with N odd, a torus of a prime N).
  static Result<Topology> Parse(std::string_view spec, size_t n, uint64_t seed);

  Kind kind() const { return kind_; }
  size_t size() const { return n_; }
  bool directed() const { return kind_ == Kind::kExponential || kind_ == Kind::kOnePeerExponential; }
  bool time_varying() const { return kind_ == Kind::kOnePeerExponential; }
  // The spec in canonical form, e.g. "regular:d=4".
  const std::string& spec() const { return spec_; }

  // Neighbours of `i` at `round`, ignoring membership. Replace `out`. For complete graphs this
  // lists N - 1 nodes: callers that only sample use SampleOut-style logic instead.
  void Out(uint32_t i, uint64_t round, std::vector<uint32_t>* out) const;
  void In(uint32_t i, uint64_t round, std::vector<uint32_t>* out) const;
  size_t Degree(uint32_t i) const;  // out-degree (= in-degree on every topology here)

  // The dense N x N mixing matrix at `round`, row-major: W[i][j] is the weight node i gives to
  // node j's model. For tests and the spectral gap; O(N^2) memory.
  std::vector<double> MixingMatrix(uint64_t round) const;

 private:
  Kind kind_ = Kind::kRing;
  size_t n_ = 0;
  std::string spec_;
  size_t torus_rows_ = 0, torus_cols_ = 0;
  std::vector<uint32_t> offsets_;      // exponential: the hops 2^k
  std::vector<uint32_t> begin_, adj_;  // regular: adjacency lists (CSR)
};

// The spectral gap 1 - sigma_2 of an N x N mixing matrix (row-major), sigma_2 its second
// largest singular value: for a symmetric matrix max(|lambda_2|, |lambda_N|), and the same for
// the normal (circulant) matrices of the exponential graphs. Rounds to shrink disagreement by
// eps grow like ln(1/eps) / gap. O(N^3); for N up to a few hundred.
double SpectralGap(const std::vector<double>& w, size_t n);

}  // namespace plexus::gossip
