// StrategySpec: a parsed strategy string such as "fedavgm:momentum=0.9" (name, then
// comma-separated key=value parameters). Getters record which keys were read so that
// CheckAllUsed() can refuse unknown parameters by name. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>

#include "core/status.h"

namespace plexus {

class StrategySpec {
 public:
  // InvalidArgument on an empty name, a parameter without '=', or a repeated key.
  static Result<StrategySpec> Parse(std::string_view text);

  const std::string& name() const { return name_; }

  // The parameter's value, `fallback` when absent; InvalidArgument when it does not parse.
  Result<double> GetDouble(const std::string& key, double fallback);
  Result<bool> GetBool(const std::string& key, bool fallback);
  // An integer in [min, max] (by default any non-negative one): InvalidArgument naming the range
  // otherwise, so that a count that drives a loop (iterations) is bounded where it is read.
  Result<int64_t> GetCount(const std::string& key, int64_t fallback, int64_t min = 0, int64_t max = INT64_MAX);
  Result<std::string> GetString(const std::string& key, const std::string& fallback);

  // InvalidArgument naming any parameter no getter asked for, and the ones that exist.
  Status CheckAllUsed() const;

 private:
  std::string name_;
  std::map<std::string, std::string> params_;
  std::set<std::string> used_;
};

}  // namespace plexus
