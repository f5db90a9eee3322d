#include "aggregators/fedbuff.h"

namespace plexus {

Status FedBuffOptions::Validate() const {
  if (buffer_size < 1) return InvalidArgumentError("buffer size must be at least 1");
  if (!(server_lr > 0)) return InvalidArgumentError("server learning rate must be positive");
  return Status::Ok();
}

Result<std::unique_ptr<FedBuffBuffer>> FedBuffBuffer::Create(const FedBuffOptions& options, StalenessRule staleness,
                                                             std::unique_ptr<Aggregator> merge) {
  PLEXUS_RETURN_IF_ERROR(options.Validate());
  if (!merge) return InvalidArgumentError("FedBuff needs a merge strategy");
  return std::unique_ptr<FedBuffBuffer>(new FedBuffBuffer(options, staleness, std::move(merge)));
}

Status FedBuffBuffer::Begin(const ModelState& base) {
  if (options_.server_lr != 1.0) base_ = base;  // only the server step reads it (a model-sized copy)
  return merge_->Begin(base);
}

Result<bool> FedBuffBuffer::Add(Update update, uint64_t staleness) {
  // Given up: the averaging family may hold it and fold it with the next ones in one pass.
  PLEXUS_RETURN_IF_ERROR(merge_->FoldShared(std::make_shared<Update>(std::move(update)), staleness_.Weight(staleness)));
  return static_cast<int64_t>(merge_->num_folded()) >= options_.buffer_size;
}

Result<ModelState> FedBuffBuffer::Flush() {
  PLEXUS_ASSIGN_OR_RETURN(ModelState merged, merge_->Finalize());
  if (options_.server_lr != 1.0) {
    auto x = merged.data();
    auto b = base_.data();
    for (size_t j = 0; j < x.size(); ++j) {
      x[j] = static_cast<float>(b[j] + options_.server_lr * (static_cast<double>(x[j]) - b[j]));
    }
  }
  return merged;
}

}  // namespace plexus
