// PublishedVersions: what every engine keeps of the versions it has published, the same way in
// every mode: the current model (a snapshot never changed in place, see Engine::model_snapshot)
// and its hash, the round records so far, and each new version's evaluation. Opened from the
// store: its latest checkpoint (or the initial model, stored as version 0), its history, and an
// evaluation of the versions a killed server left without one. Borrows store and evaluator
// (which may be null). Single-threaded (owned by an engine).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/model_state.h"
#include "core/round_record.h"
#include "core/status.h"
#include "server/coordinator/engine.h"
#include "server/coordinator/evaluator.h"
#include "server/store/store.h"

namespace plexus {

class PublishedVersions {
 public:
  // FailedPrecondition when the store holds a model of another layout than `initial`. `rest`
  // receives what else the store held for the engine: client ids and the strategy's state (its
  // model and history move into the result).
  static Result<PublishedVersions> Open(Store* store, ModelEvaluator* evaluator, const ModelState& initial,
                                        RestoredState* rest);

  const ModelState& model() const { return *model_; }
  const std::shared_ptr<const ModelState>& snapshot() const { return model_; }
  uint64_t version() const { return model_->version(); }
  const std::string& sha256() const { return sha256_; }
  uint32_t crc32c() const { return crc32c_; }  // the model's ContentCrc32c, named in its tasks
  const std::vector<RoundRecord>& history() const { return history_; }
  std::optional<double> last_accuracy() const { return LastAccuracy(history_); }

  // Makes `model`, committed with `record` (its model_sha256 filled in), the current version,
  // evaluates it (into the store and the record) and appends the record. `crc32c`: the model's
  // ContentCrc32c, computed with its hash (ModelState::Digests). Returns the store's error for the
  // evaluation, which the engine makes sticky.
  Status Publish(std::shared_ptr<const ModelState> model, RoundRecord record, uint32_t crc32c);

  // The status fields about versions: model_version, round (the one in progress, or the last
  // when `finished`), last_accuracy and finished.
  void FillStatus(bool finished, EngineStatus* s) const {
    s->model_version = version();
    s->round = finished ? version() : version() + 1;
    s->last_accuracy = last_accuracy();
    s->finished = finished;
  }

 private:
  PublishedVersions(Store* store, ModelEvaluator* evaluator) : store_(store), evaluator_(evaluator) {}

  Store* store_;
  ModelEvaluator* evaluator_;
  std::shared_ptr<const ModelState> model_;
  std::string sha256_;
  uint32_t crc32c_ = 0;
  std::vector<RoundRecord> history_;
};

}  // namespace plexus
