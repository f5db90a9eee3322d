#include "aggregators/staleness.h"

#include <cmath>
#include <cstdio>

#include "aggregators/strategy_spec.h"

namespace plexus {

Result<StalenessRule> StalenessRule::Parse(std::string_view text) {
  PLEXUS_ASSIGN_OR_RETURN(StrategySpec spec, StrategySpec::Parse(text));
  StalenessRule r;
  if (spec.name() == "constant") {
    r.kind_ = Kind::kConstant;
  } else if (spec.name() == "poly") {
    r.kind_ = Kind::kPolynomial;
    PLEXUS_ASSIGN_OR_RETURN(r.a_, spec.GetDouble("a", 0.5));
  } else if (spec.name() == "hinge") {
    r.kind_ = Kind::kHinge;
    PLEXUS_ASSIGN_OR_RETURN(r.a_, spec.GetDouble("a", 10.0));
    PLEXUS_ASSIGN_OR_RETURN(r.b_, spec.GetDouble("b", 4.0));
  } else {
    return InvalidArgumentError("unknown staleness rule '" + spec.name() + "' (known: constant, hinge, poly)");
  }
  if (r.a_ < 0 || r.b_ < 0)
    return InvalidArgumentError("staleness rule '" + std::string(text) + "': a and b must not be negative");
  PLEXUS_RETURN_IF_ERROR(spec.CheckAllUsed());
  return r;
}

double StalenessRule::Weight(uint64_t staleness) const {
  const auto tau = static_cast<double>(staleness);
  switch (kind_) {
    case Kind::kConstant:
      return 1.0;
    case Kind::kPolynomial:
      return std::pow(tau + 1.0, -a_);
    case Kind::kHinge:
      return tau <= b_ ? 1.0 : 1.0 / (a_ * (tau - b_) + 1.0);
  }
  return 1.0;
}

std::string StalenessRule::Describe() const {
  char buf[64];
  switch (kind_) {
    case Kind::kConstant:
      return "constant";
    case Kind::kPolynomial:
      std::snprintf(buf, sizeof buf, "poly:a=%g", a_);
      return buf;
    case Kind::kHinge:
      std::snprintf(buf, sizeof buf, "hinge:a=%g,b=%g", a_, b_);
      return buf;
  }
  return "constant";
}

}  // namespace plexus
