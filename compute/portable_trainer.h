// The portable trainer: the built-in models (model_zoo.h: mlp, cnn) trained in plain C++, for
// devices without LibTorch. Forward, backward, softmax cross-entropy (mean over the batch) and SGD
// with momentum as PyTorch defines them (buf = momentum * buf + grad, w -= lr * buf, the first
// buffer the gradient itself), FedProx's proximal term, the same batch order as the LibTorch
// trainer for the same seed. Every sum runs in a fixed order and the file is compiled with
// -ffp-contract=off (no fused multiply-add), so a model trained from the same start, data and seed
// has the same bits on x86-64, aarch64 and riscv64. Slower than LibTorch (no BLAS); fine for the
// MLP on a device, slow for the CNN.
// A trainer is thread-compatible: one per thread.
#pragma once

#include <memory>
#include <string>

#include "compute/trainer.h"

namespace plexus {

// InvalidArgument for a model the portable trainer does not know.
Result<std::unique_ptr<Trainer>> MakePortableTrainer(const std::string& model_name);

}  // namespace plexus
