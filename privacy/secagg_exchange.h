// What a member of a secure round and the server say to each other, whatever carries it: gRPC
// between `plexus client` and `plexus server` (proto/plexus/v1/federation.proto, SecureAggregation),
// or plain calls in tests and the simulator. A member sends one Call at a time and is answered
// with a View: where the round stands and what the member needs for the stage it is at.
//
// It also fixes how an update becomes the values a member masks (WeightedEncoding): each delta
// value is clipped to [−clip, clip] and pre-weighted by the member's weight w = min(examples,
// weight_cap) / weight_cap, and w·clip follows as one more value; the group's sum then decodes to
// Σw·δ and Σw, whose quotient is the weighted mean FedAvg takes, within a rounding bound stated
// below. Plain data and pure functions; thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "privacy/fixed_point.h"
#include "privacy/gaussian_noise.h"
#include "privacy/secagg.h"

namespace plexus::secagg {

// Everything a member needs to take part in one round.
struct Setup {
  Params params;           // length = the model's values + 1 (the weight)
  uint32_t member = 0;     // this member's id in params.members
  double clip = 1.0;       // each delta value is clipped to [−clip, clip]
  int64_t weight_cap = 0;  // examples at which a member's weight reaches 1
  // > 0: central differential privacy over the group's sum: each member clips its delta to this
  // L2 norm before anything else (the server, which never sees a delta, cannot), and the server
  // adds the noise to the unmasked sum (dp_fedavg with summed=1).
  double l2_clip = 0;
  // > 0: distributed DP: each member adds Gaussian noise of this standard deviation to each
  // value after its L2 clip, sized so that any group the server can unmask carries the noise the
  // accountant counts (--dp distributed; the server adds none).
  double noise_std = 0;
};

// How a group's updates are quantized, pre-weighted and decoded (see the file comment).
class WeightedEncoding {
 public:
  // InvalidArgument for a clip that is not positive and finite, a weight cap below 1 or a group
  // too large for 32 bits.
  static Result<WeightedEncoding> For(const Setup& setup);

  // The values a member masks for `delta` trained on `examples` examples (params.length of them);
  // the rounding's randomness comes from `seed`, a secret of the member's own. With an L2 clip the
  // delta is first scaled to that norm at most. *clipped counts the delta values that lay outside
  // [−clip, clip] after that. InvalidArgument for a delta of another length,
  // a non-finite value or examples < 1.
  // With the setup's noise_std, `noise` (the member's own generator) adds it after the L2 clip;
  // InvalidArgument without one.
  Result<std::vector<uint32_t>> Encode(std::span<const float> delta, int64_t examples, const Secret32& seed,
                                       int64_t* clipped, GaussianNoise* noise = nullptr) const;

  struct Mean {
    std::vector<float> delta;  // Σw·clip(δ) / Σw
    double total_weight = 0;   // Σw
  };
  // The weighted mean of `inputs` members' updates from the sum of their encodings.
  // InvalidArgument when the sum carries no weight (nothing to divide by) or more inputs than the
  // group has.
  Result<Mean> DecodeMean(std::span<const uint32_t> sum, int64_t inputs) const;

  // How far one value of DecodeMean's delta may lie from the exact weighted mean of the clipped
  // deltas, for a mean of `inputs` updates whose decoded weight is `total_weight`: each sum is off
  // by less than inputs·step (step: FixedPoint's rounding bound), so the quotient by less than
  // 2·inputs·step / total_weight, plus float32's rounding of the result.
  double MeanBound(int64_t inputs, double total_weight) const;

  double clip() const { return clip_; }

 private:
  WeightedEncoding(FixedPoint fixed, double clip, int64_t weight_cap, size_t length, double l2_clip, double noise_std)
      : fixed_(fixed),
        clip_(clip),
        weight_cap_(weight_cap),
        length_(length),
        l2_clip_(l2_clip),
        noise_std_(noise_std) {}
  FixedPoint fixed_;
  double clip_;
  int64_t weight_cap_;
  size_t length_;
  double l2_clip_;    // 0: none
  double noise_std_;  // 0: none
};

// The most values one masked chunk carries (1 MiB): far below gRPC's message limit whatever the
// model. Members cut their input into chunks of this size; the server refuses larger ones.
inline constexpr size_t kMaxChunkValues = size_t{1} << 18;

// A member's message (one per call).
struct Call {
  enum class Kind { kQuery, kAdvert, kShares, kMaskedChunk, kRevealed };
  Kind kind = Kind::kQuery;
  bool want_setup = false;  // answer with the Setup (a member's first call)
  KeyAdvert advert;         // kAdvert
  SealedShares shares;      // kShares
  // kMaskedChunk: values [offset, offset + values.size()) of the masked input; a chunk must start
  // where the server's count (View::masked_received) stands, and the last completes the input.
  uint64_t offset = 0;
  std::vector<uint32_t> values;
  RevealedShares revealed;  // kRevealed
};

// The server's answer: the round's stage and what this member needs for it.
struct View {
  std::optional<Setup> setup;  // when asked for
  Server::Stage stage = Server::Stage::kAdvertise;
  bool answered = false;                            // this member's message of this stage is in
  std::vector<KeyAdvert> adverts;                   // kShareKeys
  std::map<uint32_t, std::vector<uint8_t>> shares;  // kMaskedInput
  uint64_t masked_received = 0;                     // kMaskedInput: values held of this member's input
  UnmaskRequest unmask;                             // kUnmask
  std::string abort_reason;                         // kAborted
  int64_t retry_after_ms = 0;                       // when asking again is worth it
};

}  // namespace plexus::secagg
