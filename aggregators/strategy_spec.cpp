#include "aggregators/strategy_spec.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace plexus {

Result<StrategySpec> StrategySpec::Parse(std::string_view text) {
  StrategySpec spec;
  const size_t colon = text.find(':');
  spec.name_ = std::string(text.substr(0, colon));
  if (spec.name_.empty()) return InvalidArgumentError("strategy '" + std::string(text) + "' has no name");
  if (colon == std::string_view::npos) return spec;
  std::string_view rest = text.substr(colon + 1);
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return InvalidArgumentError("strategy parameter '" + std::string(item) + "' is not key=value");
    }
    const std::string key(item.substr(0, eq));
    if (!spec.params_.emplace(key, std::string(item.substr(eq + 1))).second) {
      return InvalidArgumentError("strategy parameter '" + key + "' is given twice");
    }
    if (comma == std::string_view::npos) break;
    rest = rest.substr(comma + 1);
  }
  return spec;
}

Result<double> StrategySpec::GetDouble(const std::string& key, double fallback) {
  used_.insert(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(it->second.c_str(), &end);
  if (it->second.empty() || *end != '\0' || errno != 0 || !std::isfinite(v)) {
    return InvalidArgumentError("strategy '" + name_ + "': parameter " + key + "='" + it->second + "' is not a number");
  }
  return v;
}

Result<bool> StrategySpec::GetBool(const std::string& key, bool fallback) {
  used_.insert(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  if (it->second == "true" || it->second == "1") return true;
  if (it->second == "false" || it->second == "0") return false;
  return InvalidArgumentError("strategy '" + name_ + "': parameter " + key + "='" + it->second + "' is not true/false");
}

Result<int64_t> StrategySpec::GetCount(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  used_.insert(key);
  auto it = params_.find(key);
  if (it == params_.end()) return fallback;
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end != '\0' || errno != 0 || v < 0) {
    return InvalidArgumentError("strategy '" + name_ + "': parameter " + key + "='" + it->second +
                                "' is not a non-negative integer");
  }
  if (v < min || v > max) {
    return InvalidArgumentError("strategy '" + name_ + "': parameter " + key + "=" + it->second + " must be between " +
                                std::to_string(min) + " and " + std::to_string(max));
  }
  return static_cast<int64_t>(v);
}

Result<std::string> StrategySpec::GetString(const std::string& key, const std::string& fallback) {
  used_.insert(key);
  auto it = params_.find(key);
  return it == params_.end() ? fallback : it->second;
}

Status StrategySpec::CheckAllUsed() const {
  for (const auto& [key, value] : params_) {
    if (!used_.count(key)) {
      std::string known;
      for (const std::string& k : used_) known += (known.empty() ? "" : ", ") + k;
      return InvalidArgumentError("strategy '" + name_ + "' has no parameter '" + key +
                                  "' (it takes: " + (known.empty() ? "none" : known) + ")");
    }
  }
  return Status::Ok();
}

}  // namespace plexus
