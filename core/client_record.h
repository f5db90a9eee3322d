// ClientRecord: what a client tells the federation about itself when it joins (its id, how many
// examples it holds, its device), as engines register and stores persist it. Plain data.
#pragma once

#include <cstdint>
#include <string>

namespace plexus {

struct ClientRecord {
  std::string id;
  int64_t num_examples = 0;
  std::string device;
};

}  // namespace plexus
