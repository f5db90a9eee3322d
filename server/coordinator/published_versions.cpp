#include "server/coordinator/published_versions.h"

namespace plexus {

Result<PublishedVersions> PublishedVersions::Open(Store* store, ModelEvaluator* evaluator, const ModelState& initial,
                                                  RestoredState* rest) {
  PLEXUS_ASSIGN_OR_RETURN(*rest, RestoreEngineState(store, initial));
  PublishedVersions v(store, evaluator);
  v.model_ = std::make_shared<const ModelState>(std::move(rest->model));
  ModelState::ContentDigests digests = v.model_->Digests();
  v.sha256_ = std::move(digests.sha256);
  v.crc32c_ = digests.crc32c;
  v.history_ = std::move(rest->history);
  PLEXUS_RETURN_IF_ERROR(EvaluateUnevaluated(evaluator, store, &v.history_));
  return v;
}

Status PublishedVersions::Publish(std::shared_ptr<const ModelState> model, RoundRecord record, uint32_t crc32c) {
  model_ = std::move(model);
  sha256_ = record.model_sha256;
  crc32c_ = crc32c;
  Status evaluated = EvaluatePublished(evaluator_, store_, *model_, &record);
  history_.push_back(std::move(record));
  return evaluated;
}

}  // namespace plexus
