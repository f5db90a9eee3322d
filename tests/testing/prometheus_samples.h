// Reading Prometheus text in tests: the value of one sample line.
#pragma once

#include <sstream>
#include <string>

namespace plexus::testing {

// The value of the sample line `name` (labels included, e.g. `x{code="A"}`), or -1 when absent.
inline double PrometheusSample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return -1;
}

}  // namespace plexus::testing
