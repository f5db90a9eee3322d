// The upload receiver: an UploadUpdate stream's chunks, read in place from gRPC's buffers, decoded
// as they arrive into the update (held once), with no server lock held. An interrupted upload
// leaves what arrived in PartialUploads; a resumed one continues from there and is checked
// against the SHA-256 its header names. Errors are the refusal to send back.
#pragma once

#include <grpcpp/grpcpp.h>

#include <string_view>
#include <vector>

#include "compression/codec.h"
#include "core/model_state.h"
#include "core/status.h"
#include "plexus/v1/federation.pb.h"
#include "server/rpc/partial_uploads.h"
#include "server/rpc/update_chunk_wire.h"
#include "server/rpc/upload_places.h"

namespace plexus {

// An upload's chunks as they come off the stream (update_chunk_wire.h). A chunk's data views
// stay valid until the next call to Next. Thread-compatible.
class UploadChunks {
 public:
  explicit UploadChunks(grpc::ServerReader<grpc::ByteBuffer>* reader) : reader_(reader) {}

  // False at the end of the stream; otherwise sets *chunk to the next chunk or to the reason it
  // is malformed.
  bool Next(Result<UpdateChunkView>* chunk);

 private:
  grpc::ServerReader<grpc::ByteBuffer>* reader_;
  grpc::ByteBuffer buffer_;
  std::vector<grpc::Slice> slices_;
  std::vector<std::string_view> views_;
};

struct ReceivedUpload {
  ModelState values;                          // the decoded payload (a delta, or weights: see the header's encoding)
  bool resumed = false;                       // it continued an interrupted upload
  uint64_t resumed_from = 0;                  // the byte it continued from (what was not sent again)
  std::shared_ptr<const CodedDelta> coded{};  // instead of `values`: a compressed delta kept coded
};

// Reads the data chunks after `header` (already checked: identity, size, place) into the decoded
// payload. `place` hears of every chunk (stall detection); `partial` keeps an interrupted upload
// and hands back the one a resume continues.
Result<ReceivedUpload> ReceiveUpload(UploadChunks& chunks, const v1::UpdateHeader& header, PartialUploads* partial,
                                     UploadPlaces::Place* place);

// Reads a compressed update (ENCODING_DELTA_CODEC: `codec`'s bytes, at most the header's
// total_bytes, which the caller bounded) and decodes it into a delta of `layout`'s tensors, or
// with `keep_coded` (REQUIRES: codec.has_coded_form()) checks it and keeps it coded. The bytes
// are held until decoded (a few times smaller than the model); an interrupted upload is not kept.
Result<ReceivedUpload> ReceiveCodedUpload(UploadChunks& chunks, const v1::UpdateHeader& header, const Codec& codec,
                                          const ModelState& layout, bool keep_coded, UploadPlaces::Place* place);

}  // namespace plexus
