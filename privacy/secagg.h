// Secure aggregation (SecAgg+, Bell et al., CCS 2020) as two pure state machines, a member's and
// the server's, with no transport in them: the server learns the sum of a group's inputs (vectors
// of uint32, added mod 2^32) and nothing about any one of them, even when members drop out at any
// stage, as long as at least `threshold` neighbours of each member stay.
//
// The stages, each closed when every expected member answered or at its deadline:
//   1. Advertise: each member sends two X25519 public keys (one to seal messages, one for masks).
//   2. Share keys: each member splits its mask private key and a fresh self-mask seed into Shamir
//      shares (any `threshold` recover them), one pair per neighbour, each sealed with
//      ChaCha20-Poly1305 under an HKDF key agreed with that neighbour; the server relays them.
//   3. Masked input: each member adds to its input a mask from its self seed and, for every
//      neighbour that shared keys, ± a mask from the key they agree on (+ towards higher ids):
//      the pairwise masks cancel in the sum, the self masks do not.
//   4. Unmask: the server names the survivors (whose inputs it holds) and the dropped (who shared
//      keys but sent no input); each member returns its shares of the survivors' self seeds and of
//      the dropped members' mask keys, never both for one member (an honest member refuses such a
//      request, and answers once). The server recovers those secrets, removes the self masks and
//      the dropped members' pairwise masks, and has the sum of the survivors' inputs.
// The graph: members on a ring in an order drawn from the server's seed, each joined to the
// `degree`/2 nearest on either side (SecAgg+: degree of order log n; every member can recompute
// it). Masks are ChaCha20 keystreams keyed by the full 32-byte secrets. Fewer than `threshold`
// answers to a stage abort the round (nothing half-released; the caller retries it).
//
// Trust: an honest-but-curious server learns only the group sum (and who took part, and when);
// a malicious server that lies about who dropped can get at most one of a member's two secrets
// from each honest member. Members' messages are not signed: a server that forges advertised keys
// is outside this model (docs/privacy.md). Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "privacy/secagg_crypto.h"
#include "privacy/shamir.h"

namespace plexus::secagg {

struct Params {
  uint64_t round = 0;             // binds every key, sealed message and mask to this round
  std::vector<uint32_t> members;  // the group's ids: distinct, above 0
  int degree = 0;                 // neighbours per member: even, or members − 1 (everyone) or more
  int threshold = 0;              // shares that recover a member's secrets: 2 ≤ t ≤ degree
  uint64_t graph_seed = 0;        // the server's seed for the graph
  size_t length = 0;              // uint32 values in each input
  // InvalidArgument naming the setting that means nothing.
  Status Validate() const;
};

// The members `member` is joined to in the round's graph (sorted). REQUIRES: params valid, member
// one of them.
std::vector<uint32_t> Neighbours(const Params& params, uint32_t member);

struct KeyAdvert {
  uint32_t from = 0;
  PublicKey32 seal_key{};  // seals the shares sent to this member
  PublicKey32 mask_key{};  // agrees the pairwise masks
};
struct SealedShares {
  uint32_t from = 0;
  std::map<uint32_t, std::vector<uint8_t>> to;  // by neighbour: its sealed pair of shares
};
struct MaskedInput {
  uint32_t from = 0;
  std::vector<uint32_t> values;
};
struct UnmaskRequest {
  std::vector<uint32_t> survivors;  // whose masked inputs are in the sum: reveal their self seeds
  std::vector<uint32_t> dropped;    // shared keys, sent no input: reveal their mask keys
};
struct RevealedShares {
  uint32_t from = 0;
  std::map<uint32_t, ShamirShare> self_seed;  // of survivors
  std::map<uint32_t, ShamirShare> mask_key;   // of dropped members
};

// One member's side. Each stage's call is made once, in order (FailedPrecondition otherwise).
class Member {
 public:
  static Result<std::unique_ptr<Member>> Create(const Params& params, uint32_t self);

  Result<KeyAdvert> Advertise();
  // `adverts`: those the server relays (its neighbours that advertised; others are ignored).
  // FailedPrecondition when fewer than `threshold` neighbours advertised.
  Result<SealedShares> ShareKeys(std::span<const KeyAdvert> adverts);
  // `received`: the sealed shares addressed to this member, by sender. InvalidArgument for a
  // sender that is not an advertised neighbour or a share that does not open; the input must be
  // params.length long.
  Result<MaskedInput> MaskInput(std::span<const uint32_t> input,
                                const std::map<uint32_t, std::vector<uint8_t>>& received);
  // Refused (PermissionDenied, nothing revealed) when a member is named both survivor and dropped,
  // when this member is not among the survivors, when fewer than `threshold` survive, or when
  // asked a second time.
  Result<RevealedShares> Unmask(const UnmaskRequest& request);

 private:
  Member(const Params& params, uint32_t self);
  struct Held {  // a neighbour's shares this member keeps
    ShamirShare mask_key, self_seed;
  };

  const Params params_;
  const uint32_t self_;
  const std::vector<uint32_t> neighbours_;
  int stage_ = 0;
  X25519KeyPair seal_, mask_;
  Secret32 self_seed_{};
  std::map<uint32_t, KeyAdvert> advertised_;  // neighbours that advertised
  std::map<uint32_t, Held> held_;             // neighbours whose shares arrived
};

// The server's side: collects each stage, relays, recovers the sum. Time is given by the caller.
class Server {
 public:
  enum class Stage { kAdvertise, kShareKeys, kMaskedInput, kUnmask, kDone, kAborted };

  // Each stage lasts at most `stage_ms` from its start (the first from `now_ms`), the masked-input
  // stage (the members' training, in a federation) `input_stage_ms` (0: stage_ms). Unmasking (the
  // secrets recovered, their masks expanded) runs on `pool` when given (borrowed, outlives it).
  static Result<std::unique_ptr<Server>> Create(const Params& params, int64_t now_ms, int64_t stage_ms,
                                                ThreadPool* pool = nullptr, int64_t input_stage_ms = 0);

  // Each refuses (InvalidArgument or FailedPrecondition, the round unharmed) a message of another
  // stage or after its stage closed, from a member not expected in it, a second one from the same
  // member, shares for members that are not the sender's advertised neighbours, a masked input of
  // the wrong length, or revealed shares the sender does not hold.
  Status Receive(const KeyAdvert& advert, int64_t now_ms);
  Status Receive(const SealedShares& shares, int64_t now_ms);
  Status Receive(const MaskedInput& input, int64_t now_ms);
  Status Receive(const RevealedShares& revealed, int64_t now_ms);
  // Closes the current stage once its deadline passed.
  void Tick(int64_t now_ms);

  Stage stage() const { return stage_; }
  int64_t deadline_ms() const { return deadline_ms_; }
  // Members the current stage waits for (those that answered the previous one).
  const std::vector<uint32_t>& expected() const { return expected_; }
  // Whether `member`'s message of the current stage is in.
  bool Answered(uint32_t member) const { return answered_.count(member) > 0; }
  // What `member` is sent for the current stage.
  std::vector<KeyAdvert> AdvertsFor(uint32_t member) const;                   // kShareKeys
  std::map<uint32_t, std::vector<uint8_t>> SharesFor(uint32_t member) const;  // kMaskedInput
  UnmaskRequest UnmaskRequestFor(uint32_t member) const;                      // kUnmask

  // kDone: the sum mod 2^32 of the inputs of included() (sorted).
  const std::vector<uint32_t>& sum() const { return sum_; }
  const std::vector<uint32_t>& included() const { return survivors_; }
  // kAborted: why.
  const std::string& abort_reason() const { return abort_reason_; }
  // How long the unmasking took (secrets recovered, masks expanded and taken off), in real
  // milliseconds: a measurement, for reports; 0 before it ran.
  double unmask_ms() const { return unmask_ms_; }

 private:
  Server(const Params& params, int64_t now_ms, int64_t stage_ms, ThreadPool* pool, int64_t input_stage_ms);
  Status Admit(Stage stage, uint32_t from, int64_t now_ms);
  void MaybeClose(int64_t now_ms);
  void Close(int64_t now_ms);
  void Abort(std::string why);
  void Unmask();

  const Params params_;
  const int64_t stage_ms_;
  const int64_t input_stage_ms_;
  ThreadPool* const pool_;
  std::map<uint32_t, std::vector<uint32_t>> graph_;
  Stage stage_ = Stage::kAdvertise;
  int64_t deadline_ms_ = 0;
  std::vector<uint32_t> expected_;
  std::map<uint32_t, bool> answered_;  // in the current stage
  std::map<uint32_t, KeyAdvert> adverts_;
  std::map<uint32_t, SealedShares> shares_;
  std::vector<uint32_t> survivors_, dropped_;
  std::vector<uint32_t> sum_;
  std::map<uint32_t, RevealedShares> revealed_;
  std::string abort_reason_;
  double unmask_ms_ = 0;
};

// "advertise keys", "share keys", "masked input", "unmask", "done", "aborted".
std::string StageName(Server::Stage stage);

}  // namespace plexus::secagg
