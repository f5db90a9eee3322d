#include "server/rpc/upload_receiver.h"

#include <grpcpp/support/sync_stream.h>

#include <optional>

#include "core/safetensors.h"

namespace plexus {

bool UploadChunks::Next(Result<UpdateChunkView>* chunk) {
  buffer_.Clear();
  slices_.clear();
  if (!reader_->Read(&buffer_)) return false;
  if (!buffer_.Dump(&slices_).ok()) {
    *chunk = InvalidArgumentError("malformed upload chunk: its bytes cannot be read");
    return true;
  }
  views_.clear();
  for (const grpc::Slice& s : slices_) views_.emplace_back(reinterpret_cast<const char*>(s.begin()), s.size());
  *chunk = ParseUpdateChunk(views_);
  return true;
}

namespace {

// Reads the data chunks after the header until the stream ends, telling `place` of each and
// handing their pieces to append(piece) -> Status; `received` (the bytes already held) counts
// them and may not pass the header's total. The first error ends the reading.
template <typename Append>
Status ReadDataChunks(UploadChunks& chunks, const v1::UpdateHeader& header, UploadPlaces::Place* place,
                      uint64_t received, Append&& append) {
  Result<UpdateChunkView> chunk = InvalidArgumentError("no chunk yet");
  while (chunks.Next(&chunk)) {
    if (!chunk.ok()) return chunk.status();
    place->Progress(chunk->data_bytes);
    if (chunk->has_header) return InvalidArgumentError("a second header chunk");
    received += chunk->data_bytes;
    if (received > header.total_bytes()) {
      return InvalidArgumentError("update carries more bytes than its header announces");
    }
    for (std::string_view piece : chunk->data) PLEXUS_RETURN_IF_ERROR(append(piece));
  }
  return Status::Ok();
}

}  // namespace

Result<ReceivedUpload> ReceiveUpload(UploadChunks& chunks, const v1::UpdateHeader& header, PartialUploads* partial,
                                     UploadPlaces::Place* place) {
  // Each chunk goes straight into the decoded model: the update is held once while it arrives.
  std::optional<SafetensorsStreamDecoder> stream;
  const uint64_t offset = header.offset();
  if (offset > 0) {
    stream = partial->Take(header.client_id(), header.task_id(), header.total_bytes());
    if (!stream || stream->received() != offset || header.payload_sha256().empty()) {
      return FailedPreconditionError("nothing to resume at byte " + std::to_string(offset) + " of task " +
                                     header.task_id() + " (the server holds " +
                                     std::to_string(stream ? stream->received() : 0) +
                                     " bytes; a resume also needs payload_sha256): upload from byte 0");
    }
  } else {
    stream.emplace(header.total_bytes());
  }
  PLEXUS_RETURN_IF_ERROR(
      ReadDataChunks(chunks, header, place, stream->received(), [&](std::string_view piece) -> Status {
        Status s = stream->Append(piece);
        return s.ok() ? s : s.WithContext("update for task " + header.task_id());
      }));
  if (stream->received() != header.total_bytes()) {
    // A dropped link or a client that stopped early: keep what came, so that it resumes.
    const std::string received = std::to_string(stream->received());
    partial->Keep(header.client_id(), header.task_id(), header.total_bytes(), std::move(*stream));
    return InvalidArgumentError("update ended after " + received + " of " + std::to_string(header.total_bytes()) +
                                " bytes (kept: resume from byte " + received + ")");
  }
  if (offset > 0 && stream->ReceivedSha256() != header.payload_sha256()) {
    return AbortedError("the resumed update of task " + header.task_id() +
                        " does not match its SHA-256: upload from byte 0");
  }
  Result<ModelState> decoded = std::move(*stream).Finish();
  if (!decoded.ok()) return decoded.status().WithContext("update for task " + header.task_id());
  return ReceivedUpload{std::move(decoded).value(), offset > 0, offset};
}

Result<ReceivedUpload> ReceiveCodedUpload(UploadChunks& chunks, const v1::UpdateHeader& header, const Codec& codec,
                                          const ModelState& layout, bool keep_coded, UploadPlaces::Place* place) {
  std::string bytes;
  bytes.reserve(header.total_bytes());
  PLEXUS_RETURN_IF_ERROR(ReadDataChunks(chunks, header, place, 0, [&](std::string_view piece) {
    bytes.append(piece);
    return Status::Ok();
  }));
  if (bytes.size() != header.total_bytes()) {
    return InvalidArgumentError("compressed update ended after " + std::to_string(bytes.size()) + " of " +
                                std::to_string(header.total_bytes()) + " bytes (not kept: upload it again)");
  }
  if (keep_coded) {
    Result<std::shared_ptr<const CodedDelta>> read = codec.Read(std::move(bytes), layout);
    if (!read.ok()) return read.status().WithContext("update for task " + header.task_id());
    ReceivedUpload received;
    received.coded = std::move(read).value();
    return received;
  }
  Result<ModelState> decoded = codec.Decode(bytes, layout);
  if (!decoded.ok()) return decoded.status().WithContext("update for task " + header.task_id());
  return ReceivedUpload{std::move(decoded).value(), false, 0, nullptr};
}

}  // namespace plexus
