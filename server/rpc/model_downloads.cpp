#include "server/rpc/model_downloads.h"

#include <utility>

namespace plexus {

Result<std::unique_ptr<ModelDownloads>> ModelDownloads::Create(Store* store, const std::string& download_codec) {
  std::unique_ptr<CodedDownloads> coded;
  if (!download_codec.empty()) {
    PLEXUS_ASSIGN_OR_RETURN(coded, CodedDownloads::Create(download_codec));
  }
  return std::unique_ptr<ModelDownloads>(new ModelDownloads(store, download_codec, std::move(coded)));
}

Result<std::shared_ptr<const Payload>> ModelDownloads::Float32(uint64_t version,
                                                               const std::shared_ptr<const ModelState>& current) {
  if (version == current->version()) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!float32_ || float32_version_ != version) {
      float32_ = Payload::SafetensorsOf(current);
      float32_version_ = version;
    }
    return float32_;
  }
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));  // a file read, without the lock
  return Payload::SafetensorsOf(std::move(m));
}

Result<CodedDownloads::Download> ModelDownloads::Coded(uint64_t version, const std::string& base_sha256,
                                                       const std::shared_ptr<const ModelState>& current,
                                                       std::optional<uint64_t> held_version) {
  std::lock_guard<std::mutex> lock(mu_);
  if (std::optional<CodedDownloads::Download> kept = coded_->Kept(version, base_sha256)) return *kept;
  if (held_version && *held_version != version && !coded_->Holds(base_sha256)) {
    // The client holds a published version exactly (downloaded in float32 for an evaluation
    // task, or kept on its disk): the change from it, while the store still has it.
    Result<ModelState> held =
        *held_version == current->version() ? Result<ModelState>(*current) : store_->Checkpoint(*held_version);
    if (held.ok()) coded_->AddHeld(std::make_shared<const ModelState>(std::move(held).value()), base_sha256);
  }
  if (version == current->version()) return coded_->For(*current, base_sha256);
  PLEXUS_ASSIGN_OR_RETURN(ModelState m, store_->Checkpoint(version));
  return coded_->For(m, base_sha256);
}

}  // namespace plexus
