#include "client/download_sink.h"

namespace plexus {

Status StringDownloadSink::Append(std::string_view piece, uint64_t total) {
  if (total_ != 0 && total != total_) return DataLossError("download: the announced size changed");
  if (bytes_->size() + piece.size() > total) return DataLossError("download: more bytes than announced");
  total_ = total;
  // Room for the whole stream at once, rather than regrowing (and recopying) it piece by piece;
  // capped, so that a server announcing a huge size cannot make the client allocate it without
  // sending it.
  constexpr uint64_t kMaxReserveBytes = uint64_t{1} << 30;
  if (bytes_->capacity() < total) bytes_->reserve(std::min<uint64_t>(total, kMaxReserveBytes));
  bytes_->append(piece);
  return Status::Ok();
}

Status ModelDownloadSink::Append(std::string_view piece, uint64_t total) {
  if (decoder_ && total != total_) return DataLossError("download: the announced size changed");
  if (!decoder_) {
    if (prefix_.size() > total) return DataLossError("download: the bytes kept are more than the model");
    total_ = total;
    decoder_.emplace(total, /*content_crc32c=*/true);
    if (!prefix_.empty()) {
      if (Status s = decoder_->Append(prefix_); !s.ok()) {
        return DataLossError("download: the bytes kept do not decode: " + s.message());
      }
      std::string().swap(prefix_);
    }
  }
  const uint64_t offset = decoder_->received();
  if (offset + piece.size() > total_) return DataLossError("download: more bytes than announced");
  if (Status s = decoder_->Append(piece); !s.ok()) return DataLossError("download: " + s.message());
  if (on_bytes_) on_bytes_(offset, piece);
  return Status::Ok();
}

void ModelDownloadSink::Reset() {
  std::string().swap(prefix_);
  decoder_.reset();
  total_ = 0;
}

Result<ModelState> ModelDownloadSink::Finish() && {
  if (!decoder_) return DataLossError("download: no bytes came");
  Result<ModelState> model = std::move(*decoder_).Finish();
  decoder_.reset();
  if (!model.ok()) return DataLossError("download: " + model.status().message());
  return model;
}

Result<ModelState> ModelDownloadSink::Finish(const std::string& sha256, std::optional<uint32_t> crc32c) && {
  // Taken as the values arrived, not in another pass over the model.
  const std::optional<uint32_t> arrived = decoder_ ? decoder_->ContentCrc32c() : std::nullopt;
  Result<ModelState> model = std::move(*this).Finish();
  if (!model.ok()) return model;
  if (crc32c) {
    if (arrived != crc32c) return DataLossError("does not match the task's CRC-32C");
  } else if (model->ContentSha256() != sha256) {
    return DataLossError("does not match the task's SHA-256");
  }
  return model;
}

}  // namespace plexus
