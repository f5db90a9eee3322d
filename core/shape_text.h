// ShapeText: a tensor's shape as the project's messages print it, "[3, 4]" ("[]" for a scalar),
// for errors that name a shape (a model's layout, a TorchScript module's output). The Python
// binding prints shapes as Python writes them instead (python/python_trainer.h). Stateless.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace plexus {

std::string ShapeText(std::span<const int64_t> shape);

}  // namespace plexus
