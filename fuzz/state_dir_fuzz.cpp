// libFuzzer target: a client's state directory (client/client_state_dir.h) holding whatever a
// crash, a full disk or a local attacker left there. The input is split into the directory's
// files (client-id, an upload's header and payload, a partial model, a residual); every reader
// runs over them. Nothing crashes, reads past its limit or returns a residual that is not finite.
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "client/client_state_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string dir =
      std::filesystem::temp_directory_path().string() + "/plexus_state_dir_fuzz_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  auto state = plexus::ClientStateDir::Open(dir, /*max_model_bytes=*/4096);
  if (!state.ok()) std::abort();
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const char* names[] = {"client-id", "upload.header", "upload.safetensors", "model-3.partial", "residual.safetensors"};
  size_t at = 0;
  for (const char* name : names) {  // files separated by a 0xff byte
    const size_t end = std::min(bytes.find('\xff', at), bytes.size());
    std::ofstream(dir + "/" + name, std::ios::binary) << bytes.substr(at, end - at);
    at = std::min(end + 1, bytes.size());
  }
  (void)(*state)->ClientId();
  (void)(*state)->LoadPendingUpload();
  bool complete = false;
  if ((*state)->ModelBytes(3, &complete).size() > 4096) std::abort();
  if (std::optional<plexus::ModelState> r = (*state)->LoadResidual()) {
    for (float v : r->data()) {
      if (!std::isfinite(v)) std::abort();
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
