// Conversions between the plexus.v1 messages and the core types at the server's door, so that
// generated protobuf types stop here (docs/architecture.md). Stateless; thread-safe.
#pragma once

#include <grpcpp/grpcpp.h>

#include <vector>

#include "core/model_state.h"
#include "core/status.h"
#include "core/task.h"
#include "core/update.h"
#include "plexus/v1/federation.pb.h"
#include "server/coordinator/engine.h"

namespace plexus {

// Status codes share their numbers with gRPC's.
grpc::Status ToGrpc(const Status& s);

// A task as the client receives it; its deadline relative to `now_ms`.
void TaskToProto(const Task& task, int64_t now_ms, v1::TrainingTask* out);

// The update an upload's header and decoded values describe (the values as sent: a delta or,
// for ENCODING_WEIGHTS_SAFETENSORS_F32, weights still to be turned into one).
Update UpdateFromHeader(const v1::UpdateHeader& header, ModelState values);

// The engine's part of a status reply: counts, accuracy, the semiasync schedule.
void EngineStatusToProto(const EngineStatus& s, v1::StatusReply* out);
// The updates merged into the newest version.
void MergedToProto(const std::vector<MergedUpdate>& merged, v1::StatusReply* out);

}  // namespace plexus
