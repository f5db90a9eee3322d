// StalenessRule: how much an update computed from an old model counts, s(tau) for
// staleness tau = (server version now) - (version the client started from). Usable by any
// strategy (FedAsync's mixing weight, FedBuff's buffer). Spelled like strategies:
//   constant             s = 1
//   poly:a=0.5           s = (tau + 1)^(-a)
//   hinge:a=10,b=4       s = 1 if tau <= b, else 1 / (a (tau - b) + 1)
// Value type; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

class StalenessRule {
 public:
  // InvalidArgument for an unknown rule or parameter, or a negative a or b.
  static Result<StalenessRule> Parse(std::string_view spec);

  double Weight(uint64_t staleness) const;
  std::string Describe() const;

 private:
  enum class Kind { kConstant, kPolynomial, kHinge };
  Kind kind_ = Kind::kConstant;
  double a_ = 0.0;
  double b_ = 0.0;
};

}  // namespace plexus
