// SecureRound: one sync round (or one FedBuff buffer) run as a secure aggregation group (SecAgg+, privacy/secagg.h):
// the clients sampled for the round are its members, each client's masked update arrives in chunks, and what comes out
// is the group's weighted mean delta (privacy/secagg_exchange.h's WeightedEncoding), never one client's update. The
// engine that owns it (SyncEngine) asks it each time whether it is done or aborted; a round it aborts is retried by the
// engine with a new group.
//
// What the server learns: each round's weighted mean and total weight, who was sampled, who took
// part in each stage and when. Nothing of a round survives a restart: the keys and shares live in
// the members' memory, so a restarted server starts the round again (docs/privacy.md).
// Borrows the pool. Thread-compatible (the engine's caller serializes calls).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "core/update.h"
#include "privacy/secagg.h"
#include "privacy/secagg_exchange.h"

namespace plexus {

class Aggregator;

// `plexus server --secagg [threshold=T,degree=K,clip=R,weight-cap=N,stage-s=S,spare=M,input-s=I]`.
struct SecAggSettings {
  int degree = 0;              // neighbours per member; 0: the smallest even number ≥ 2·log2(n), at most n − 1
  int threshold = 0;           // shares that recover a secret; 0: degree/2 + 1
  double clip = 1.0;           // each delta value is clipped to [−clip, clip]
  bool clip_given = false;     // clip=R was in the spec (else the default, which --dp may change)
  int64_t weight_cap = 65536;  // examples at which a client's weight reaches 1
  // Longest a stage other than the masked input (whose members train) may last; 0: 30 s, or the
  // round deadline when that is shorter. The masked-input stage lasts at most the round deadline.
  double stage_s = 0;
  // FedBuff (--mode async): members a group takes beyond --buffer-size, for dropouts; -1: a
  // fifth of the buffer, at least 1. Sync rounds' groups are their sample: not used there.
  int64_t spare = -1;
  // FedBuff: the longest its members may train, the masked-input stage; 0: the task timeout
  // (sync rounds' is the round deadline).
  double input_s = 0;
  // Central DP (--dp central with --secagg; set by the server, not a --secagg parameter): members
  // clip their deltas to this L2 norm, and the engine folds the group's sum, not its mean, into
  // dp_fedavg (summed=1), which adds the noise. 0: none.
  double l2_clip = 0;
  // Distributed DP (--dp distributed): the noise multiplier Z of the members' noise; each member of
  // a group with threshold t adds N(0, (Z·l2_clip)²/t), so any group the server can unmask (t
  // members at least) carries noise Z·l2_clip or more. 0: the server adds the noise, or none.
  double member_noise = 0;

  // "" or "threshold=T,degree=K,clip=R,weight-cap=N,stage-s=S" (any of them). InvalidArgument naming the
  // parameter that does not parse or means nothing.
  static Result<SecAggSettings> Parse(const std::string& spec);
  // The group's degree and threshold for `n` members (n ≥ 3); InvalidArgument when a stated
  // threshold cannot be met by that group.
  Result<std::pair<int, int>> GraphFor(int n) const;
  std::string Describe() const;
  // The longest a stage other than the masked input may last: stage_s, or 30 s.
  int64_t StageMs() const { return stage_s > 0 ? std::llround(stage_s * 1000) : int64_t{30000}; }
  // FedBuff: the longest the masked-input stage may last: input_s, at most `task_timeout_ms`.
  int64_t InputStageMs(int64_t task_timeout_ms) const {
    return input_s > 0 ? std::min<int64_t>(task_timeout_ms, std::llround(input_s * 1000)) : task_timeout_ms;
  }
  // FedBuff: the members of a group for a buffer of `buffer_size` updates.
  int64_t GroupSize(int64_t buffer_size) const {
    return buffer_size + (spare >= 0 ? spare : std::max<int64_t>(1, (buffer_size + 4) / 5));
  }
};

// Whether the strategy `spec` (its made instance `merge`) can merge what secure groups give: the
// group's weighted mean for the averaging strategies, or, under central DP (settings.l2_clip), the
// group's sum for dp_fedavg with summed=true. InvalidArgument saying why not.
Status CheckSecureStrategy(const SecAggSettings& settings, const std::string& spec, const Aggregator& merge);

class SecureRound {
 public:
  // `clients`: the round's members (distinct); `binding`: unique to this round and attempt;
  // `layout`: the model whose delta the members send. The masked-input stage lasts at most
  // `input_stage_ms`, the others as the settings say (at most that too).
  static Result<std::unique_ptr<SecureRound>> Start(const SecAggSettings& settings, uint64_t binding, uint64_t seed,
                                                    const std::vector<std::string>& clients, const ModelState& layout,
                                                    int64_t now_ms, int64_t input_stage_ms, ThreadPool* pool);

  // A member's call. NotFound for a client not in the group; the stage machine's refusals
  // (replayed, late or malformed messages) otherwise, the round unharmed.
  Result<secagg::View> Exchange(const std::string& client_id, const secagg::Call& call, int64_t now_ms);
  void Tick(int64_t now_ms) { server_->Tick(now_ms); }
  // Whether `client` may still take its task: a member before its keys are advertised.
  bool Joinable(const std::string& client_id) const;

  secagg::Server::Stage stage() const { return server_->stage(); }
  const std::string& abort_reason() const { return server_->abort_reason(); }
  double unmask_ms() const { return server_->unmask_ms(); }
  // kDone: the members whose updates are in the mean (sorted client ids).
  std::vector<std::string> included() const;
  // kDone: the weighted mean of the included updates as one update of `base` (its weight the sum
  // of theirs, in examples); InvalidArgument when it cannot be decoded.
  Result<Update> MeanUpdate(const ModelState& base, const std::string& task_id) const;
  // kDone: their weighted sum (with an L2 clip: the sum of the clipped deltas, weights 1), as one
  // update whose examples count the included members; what dp_fedavg:summed=1 folds.
  Result<Update> SumUpdate(const ModelState& base, const std::string& task_id) const;
  // The update the engine folds: the sum under central DP (settings' l2_clip), the mean otherwise.
  Result<Update> GroupUpdate(const ModelState& base, const std::string& task_id) const {
    return setup_.l2_clip > 0 ? SumUpdate(base, task_id) : MeanUpdate(base, task_id);
  }

 private:
  SecureRound(secagg::Setup setup, secagg::WeightedEncoding encoding, std::unique_ptr<secagg::Server> server,
              std::map<std::string, uint32_t> member_of, int64_t retry_ms)
      : setup_(std::move(setup)),
        encoding_(std::move(encoding)),
        server_(std::move(server)),
        member_of_(std::move(member_of)),
        retry_ms_(retry_ms) {}
  secagg::View ViewFor(uint32_t member, bool with_setup) const;
  // MeanUpdate (sum false) and SumUpdate (true).
  Result<Update> Decoded(const ModelState& base, const std::string& task_id, bool sum) const;

  secagg::Setup setup_;  // member left 0: each member's copy names it
  secagg::WeightedEncoding encoding_;
  std::unique_ptr<secagg::Server> server_;
  std::map<std::string, uint32_t> member_of_;
  std::map<uint32_t, std::vector<uint32_t>> masked_;  // inputs still arriving, by member
  int64_t retry_ms_;
};

}  // namespace plexus
