#include "simulations/pipe_trainer.h"

#include <errno.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

namespace plexus {
namespace {

// A reply's line is a few numbers; anything this long is not one.
constexpr size_t kMaxLineBytes = 1 << 20;

}  // namespace

PipeTrainer::PipeTrainer(int from_trainer, int to_trainer) : from_trainer_(from_trainer), to_trainer_(to_trainer) {}

PipeTrainer::~PipeTrainer() {
  // Closing our end tells the trainer that the run is over.
  if (to_trainer_ >= 0) ::close(to_trainer_);
  if (from_trainer_ >= 0) ::close(from_trainer_);
}

Status PipeTrainer::WriteAll(const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(to_trainer_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return UnavailableError(std::string("the training loop's process stopped reading its jobs (") +
                              std::strerror(errno) + ")");
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status PipeTrainer::ReadAll(void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(from_trainer_, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError(std::string("reading the training loop's reply: ") + std::strerror(errno));
    if (n == 0) return UnavailableError("the training loop's process closed its pipe in the middle of a reply");
    p += n;
    size -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<std::string> PipeTrainer::ReadLine() {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(from_trainer_, &c, 1);  // byte by byte: nothing past the line is taken
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return UnavailableError(std::string("reading the training loop's reply: ") + std::strerror(errno));
    if (n == 0) return UnavailableError("the training loop's process closed its pipe without replying");
    if (c == '\n') return line;
    if (line.size() >= kMaxLineBytes) return InvalidArgumentError("the training loop's reply has no end of line");
    line.push_back(c);
  }
}

Status PipeTrainer::SendLayout(const ModelState& model, int64_t train_examples) {
  nlohmann::json layout = nlohmann::json::array();
  for (const TensorSlot& t : model.tensors()) layout.push_back({{"name", t.name}, {"shape", t.shape}});
  const std::string line = nlohmann::json{{"layout", layout}, {"train_examples", train_examples}}.dump() + "\n";
  return WriteAll(line.data(), line.size());
}

Result<TrainOutcome> PipeTrainer::Train(const ModelState& base, const DatasetView& data, const TrainOptions& o) {
  if (data.label_map != nullptr) {
    return InvalidArgumentError("label-flipping attackers train on the simulator's own trainer, not a loop of yours");
  }
  const uint64_t key = jobs_sent_++;
  const std::string line = nlohmann::json{{"key", key},
                                          {"task_id", o.task_id},
                                          {"round", o.round},
                                          {"local_steps", o.local_steps},
                                          {"local_epochs", o.local_epochs},
                                          {"batch_size", o.batch_size},
                                          {"learning_rate", o.learning_rate},
                                          {"momentum", o.momentum},
                                          {"optimizer", o.optimizer},
                                          {"weight_decay", o.weight_decay},
                                          {"seed", o.seed},
                                          {"config", o.config},
                                          {"indices", data.indices.size()},
                                          {"floats", base.num_params()}}
                               .dump() +
                           "\n";
  PLEXUS_RETURN_IF_ERROR(WriteAll(line.data(), line.size()));
  PLEXUS_RETURN_IF_ERROR(WriteAll(data.indices.data(), data.indices.size() * sizeof(uint32_t)));
  PLEXUS_RETURN_IF_ERROR(WriteAll(base.data().data(), base.num_bytes()));

  PLEXUS_ASSIGN_OR_RETURN(std::string reply_line, ReadLine());
  const nlohmann::json reply = nlohmann::json::parse(reply_line, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object()) return InvalidArgumentError("the training loop's reply is not a JSON object: " + reply_line);
  if (reply.contains("error")) {
    return AbortedError("the training loop failed: " +
                        (reply["error"].is_string() ? reply["error"].get<std::string>() : reply["error"].dump()));
  }
  const auto integer = [&](const char* name) -> const nlohmann::json* {
    auto f = reply.find(name);
    return f != reply.end() && f->is_number_integer() && *f >= 0 ? &*f : nullptr;
  };
  const nlohmann::json* examples = integer("examples");
  const nlohmann::json* floats = integer("floats");
  if (examples == nullptr || floats == nullptr) {
    return InvalidArgumentError("the training loop's reply needs \"examples\" and \"floats\" (counts): " + reply_line);
  }
  if (floats->get<uint64_t>() != base.num_params()) {
    return InvalidArgumentError("the training loop returned " + floats->dump() + " values where the model has " +
                                std::to_string(base.num_params()));
  }
  TrainOutcome out;
  out.weights = ModelState::UninitializedLike(base);
  out.weights.set_version(base.version());
  PLEXUS_RETURN_IF_ERROR(ReadAll(out.weights.data().data(), out.weights.num_bytes()));
  PLEXUS_RETURN_IF_ERROR(out.weights.CheckFinite().WithContext("the training loop's weights"));
  out.num_examples = examples->get<int64_t>();
  out.steps = TotalSteps(o, static_cast<int64_t>(data.indices.size()));
  const auto loss = reply.find("loss");
  if (loss != reply.end() && loss->is_number()) out.mean_loss = loss->get<double>();
  if (!std::isfinite(out.mean_loss)) return InvalidArgumentError("the training loop's loss is not finite");
  return out;
}

Result<Evaluation> PipeTrainer::Evaluate(const ModelState&, const DatasetView&) {
  return FailedPreconditionError(
      "the caller's training loop only trains; the simulator evaluates with its own trainer");
}

}  // namespace plexus
