// Task vocabulary shared by the coordinator (which hands tasks out) and the client (which runs
// them): what to train, from which model version, with which hyperparameters. Value types.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace plexus {

struct TaskHyperparams {
  int64_t local_epochs = 1;  // passes over the local data (ignored when local_steps > 0)
  int64_t local_steps = 0;   // optimizer steps; 0 means "use local_epochs"
  int64_t batch_size = 32;
  double learning_rate = 0.01;
  double momentum = 0.9;  // SGD's; AdamW's first-moment decay is its own (0.9)
  // The client's inner optimizer: "sgd" (with momentum) or "adamw" (decoupled weight decay, its
  // moments kept by the client from task to task: compute/trainer.h's OptimizerState).
  std::string optimizer = "sgd";
  double weight_decay = 0.0;  // AdamW's decoupled weight decay
  // The operator's own settings for user-written training loops (`--task-config KEY=VALUE`,
  // e.g. an augmentation strength), passed to the loop as they are; the built-in trainers
  // ignore them.
  std::map<std::string, std::string> config;

  // The optimizer steps of one task on `examples` local examples: local_steps when set, else
  // local_epochs passes of ceil(examples / batch_size) batches.
  int64_t StepsFor(int64_t examples) const {
    return local_steps > 0 ? local_steps : local_epochs * ((examples + batch_size - 1) / batch_size);
  }
};

struct Task {
  std::string task_id;
  uint64_t round = 0;
  uint64_t model_version = 0;
  std::string model_sha256;  // ModelState::ContentSha256 of that version
  // ModelState::ContentCrc32c of that version, what a client checks its download against (the
  // link already vouches for the bytes in transit; this, that they are the version named). Unset
  // from servers before it, and in tasks that name a version some other way: the client then
  // computes model_sha256 itself.
  std::optional<uint32_t> model_crc32c;
  TaskHyperparams hyperparams;
  int64_t deadline_ms = 0;  // on the engine's clock
  // The codec (compression/codec.h spec) the update is to be sent in; empty: float32
  // safetensors. Set by the server's door for clients that advertised the codec, not by engines.
  std::string upload_codec;
  // The codec the model of model_version is to be downloaded in (the change from the client's
  // last download when the server still holds it, else the whole model); empty: float32
  // safetensors. Set by the server's door, like upload_codec.
  std::string download_codec;
  // Federated evaluation (server/coordinator/federated_evaluation.h): evaluate the model of
  // model_version on the local held-out data and report, instead of training; set by the
  // server's door, not by engines.
  bool evaluate_only = false;
};

// The answer to "is there work for me?".
struct PollAnswer {
  enum class Kind { kTask, kWait, kFinished };
  Kind kind = Kind::kWait;
  Task task;                   // when kind == kTask
  int64_t retry_after_ms = 0;  // when kind == kWait
};

}  // namespace plexus
