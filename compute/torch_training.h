// What the two LibTorch trainers share (the built-in models in torch_trainer.cpp, users' TorchScript
// modules in script_trainer.cpp): batches from a DatasetView, the SGD loop and the evaluation
// loop over a forward function. Internal to compute/: it includes LibTorch. Defined in
// torch_trainer.cpp (a LibTorch translation unit fewer to compile). Stateless functions.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "compute/trainer.h"

namespace plexus::torch_training {

// What a step minimizes: cross-entropy of logits against class labels, or the mean squared error
// of predictions against the data's targets (regression).
// kNextByte: a language model's windows of context + 1 bytes, the first `context` in, logits
// [batch, context, 256] out, cross-entropy against each next byte; losses and accuracies are per
// predicted byte.
enum class Objective { kCrossEntropy, kMse, kNextByte };

// Logits [batch, classes] (or predictions [batch, target_width]) for a batch of inputs [batch, example_shape...]; an
// error when the model cannot take them. May throw a LibTorch exception (caught by the loops below).
using Forward = std::function<Result<torch::Tensor>(const torch::Tensor& x)>;

// Examples idx[b, e) of `d` as inputs [e - b, example_shape...] and int64 labels, or float
// targets [e - b, target_width] for a regression data set.
std::pair<torch::Tensor, torch::Tensor> Batch(const Dataset& d, const std::vector<uint32_t>& idx, int64_t b, int64_t e,
                                              const uint8_t* label_map);

// A batch of windows [batch, context + 1] (byte values as floats) as the model's input [batch,
// context] and int64 targets [batch, context]: each position's next byte.
std::pair<torch::Tensor, torch::Tensor> NextByteTargets(const torch::Tensor& windows);

// Runs the optimizer steps of `o` on `params` (SGD with momentum, or AdamW with the moments of
// o.optimizer_state, which a finished run advances; FedProx term; batches in the seeded order every
// trainer uses) and returns the mean loss. Aborted when the loss stops being finite;
// InvalidArgument (prefixed with `what`) when LibTorch throws.
Result<double> RunSteps(const std::vector<torch::Tensor>& params, const Forward& forward, const DatasetView& data,
                        const TrainOptions& o, const std::string& what, Objective objective);

// Over `data`, in batches of 1000, without gradients: mean cross-entropy and accuracy; for kMse the
// mean squared error and, as the accuracy, R^2 (1 - SSE / SST over the data's targets, clipped to
// [0, 1]).
Result<Evaluation> EvaluateLogits(const Forward& forward, const DatasetView& data, const std::string& what,
                                  Objective objective);

// Sets OpenBLAS's own thread count (LibTorch's BLAS on Debian), which torch::set_num_threads leaves
// alone: OpenBLAS otherwise starts a thread per CPU, and its results depend on that count.
void SetOpenBlasThreads(int threads);

// The first line of a LibTorch exception's message (the rest is a C++ backtrace).
std::string FirstLine(const std::exception& e);

}  // namespace plexus::torch_training
