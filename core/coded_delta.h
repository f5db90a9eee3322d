// CodedDelta: a client's delta kept in its codec's compact form (int8 steps with their chunk
// scales, top-k index/value pairs) instead of float32, so that a strategy linear in the deltas
// (the averaging family) folds it straight into its running sum and the store persists the
// compact bytes: the server never writes or reads a float32 copy of the update. Made only by a
// codec (compression/) from bytes it validated (sizes, indices, finite scales and values), so
// every value it yields is finite. Immutable; thread-safe.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class CodedDelta {
 public:
  virtual ~CodedDelta() = default;

  // The codec spec the bytes are in ("int8:chunk=4096") and the bytes themselves: what the store
  // persists, and what a CodedDeltaReader turns back into this object.
  virtual const std::string& codec() const = 0;
  virtual const std::string& bytes() const = 0;

  virtual size_t num_values() const = 0;
  // sum[i] = w x value(i) (`first`), else sum[i] += w x value(i), for i in [begin, end); `sum`
  // is indexed from value 0. value(i) is the float Decode gives, widened to double, so a fold
  // from the codes sums what a fold of the decoded delta would. Ranges may run concurrently.
  // REQUIRES: begin <= end <= num_values().
  virtual void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const = 0;
  // sum_i value(i)^2, in double.
  virtual double SquaredNorm() const = 0;
  // The decoded values in `layout`'s tensors: the codec's Decode of bytes().
  // REQUIRES: layout.num_params() == num_values().
  virtual ModelState Materialize(const ModelState& layout) const = 0;
};

// Turns persisted (codec spec, bytes) back into a CodedDelta, checking them as the codec's
// decoder does. Given to the store by the program that links the codecs (the store may not).
using CodedDeltaReader =
    std::function<Result<std::shared_ptr<const CodedDelta>>(const std::string& codec, std::string bytes)>;

}  // namespace plexus
