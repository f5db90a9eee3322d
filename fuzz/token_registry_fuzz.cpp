// libFuzzer target: the server's token file (`--tokens`), one "CLIENT SHA256_HEX" per line.
#include <cstdint>
#include <string>

#include "server/rpc/token_registry.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (auto registry = plexus::TokenRegistry::Parse(text); registry.ok()) (void)registry->ClientFor(text);
  return 0;
}
