#include "client/client_state_dir.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/atomic_file.h"
#include "core/model_state.h"
#include "core/safetensors.h"

namespace plexus {
namespace {

constexpr char kIdFile[] = "client-id";
constexpr char kUploadPayloadFile[] = "upload.safetensors";
constexpr char kUploadHeaderFile[] = "upload.header";
constexpr char kModelPrefix[] = "model-";
constexpr char kResidualFile[] = "residual.safetensors";

std::optional<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::move(out).str();
}

void RemoveQuietly(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

bool OneLine(const std::string& s) { return s.find('\n') == std::string::npos; }

}  // namespace

Result<std::unique_ptr<ClientStateDir>> ClientStateDir::Open(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError("cannot create the state directory '" + dir + "': " + ec.message());
  std::unique_ptr<ClientStateDir> state(new ClientStateDir(dir));
  // Fails early (at start, with a clear message) rather than at the first download.
  const std::string probe = state->File(".probe");
  if (Status s = WriteFileAtomically(probe, {"ok"}); !s.ok()) {
    return InvalidArgumentError("the state directory '" + dir + "' is not writable: " + s.message());
  }
  RemoveQuietly(probe);
  return state;
}

std::string ClientStateDir::ClientId() const {
  std::optional<std::string> id = ReadWholeFile(File(kIdFile));
  if (!id) return "";
  while (!id->empty() && id->back() == '\n') id->pop_back();
  return OneLine(*id) ? *id : "";
}

Status ClientStateDir::SaveClientId(const std::string& id) {
  if (!OneLine(id)) return InvalidArgumentError("a client id with a line break");
  if (id == ClientId()) return Status::Ok();
  return WriteFileAtomically(File(kIdFile), {id, "\n"});
}

std::string ClientStateDir::ModelFile(uint64_t version, bool complete) const {
  return File(kModelPrefix + std::to_string(version) + (complete ? ".safetensors" : ".partial"));
}

std::string ClientStateDir::ModelBytes(uint64_t version, bool* complete) const {
  if (std::optional<std::string> whole = ReadWholeFile(ModelFile(version, true))) {
    *complete = true;
    return std::move(*whole);
  }
  *complete = false;
  return ReadWholeFile(ModelFile(version, false)).value_or("");
}

void ClientStateDir::DropModelsExcept(uint64_t version) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(kModelPrefix, 0) != 0) continue;
    const std::string keep = std::string(kModelPrefix) + std::to_string(version) + ".";
    if (name.rfind(keep, 0) != 0) RemoveQuietly(entry.path().string());
  }
}

Status ClientStateDir::AppendModelBytes(uint64_t version, uint64_t at_offset, std::string_view bytes) {
  const std::string path = ModelFile(version, false);
  if (at_offset == 0) {
    DropModelsExcept(version);
    RemoveQuietly(ModelFile(version, true));
  }
  // Appended to (not rewritten): a download writes each byte once. A torn tail after a crash
  // shows as a size that does not match, or in the end as a SHA-256 that does not.
  std::FILE* f = std::fopen(path.c_str(), at_offset == 0 ? "wb" : "ab");
  if (!f) return UnavailableError("cannot write '" + path + "': " + std::strerror(errno));
  const long size = std::fseek(f, 0, SEEK_END) == 0 ? std::ftell(f) : -1;
  if (size < 0 || static_cast<uint64_t>(size) != at_offset) {
    std::fclose(f);
    return FailedPreconditionError("'" + path + "' holds " + std::to_string(size) + " bytes, not " +
                                   std::to_string(at_offset));
  }
  const bool written = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) return UnavailableError("cannot write '" + path + "': " + std::strerror(errno));
  return Status::Ok();
}

Status ClientStateDir::CompleteModel(uint64_t version) {
  const std::string from = ModelFile(version, false);
  const std::string to = ModelFile(version, true);
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    return UnavailableError("cannot rename '" + from + "': " + std::strerror(errno));
  }
  DropModelsExcept(version);
  return Status::Ok();
}

void ClientStateDir::DropModel(uint64_t version) {
  RemoveQuietly(ModelFile(version, true));
  RemoveQuietly(ModelFile(version, false));
}

Status ClientStateDir::SavePendingUpload(const UploadHeader& h, std::string_view payload) {
  if (!OneLine(h.client_id) || !OneLine(h.task_id) || !OneLine(h.codec)) {
    return InvalidArgumentError("an id or codec with a line break");
  }
  std::ostringstream header;
  header.precision(17);
  header << "client_id=" << h.client_id << "\ntask_id=" << h.task_id << "\nbase_version=" << h.base_version
         << "\nnum_examples=" << h.num_examples << "\nlocal_steps=" << h.local_steps
         << "\npayload_sha256=" << Sha256Hex({payload}) << "\ncodec=" << h.codec << "\n";
  for (const auto& [name, value] : h.metrics) {
    if (!OneLine(name) || name.find('=') != std::string::npos) continue;
    header << "metric." << name << "=" << value << "\n";
  }
  // The header goes last: a payload without a header is an unfinished save, and is ignored.
  RemoveQuietly(File(kUploadHeaderFile));
  PLEXUS_RETURN_IF_ERROR(WriteFileAtomically(File(kUploadPayloadFile), {payload}));
  return WriteFileAtomically(File(kUploadHeaderFile), {header.str()});
}

std::optional<PendingUpload> ClientStateDir::LoadPendingUpload() {
  std::optional<std::string> header = ReadWholeFile(File(kUploadHeaderFile));
  std::optional<std::string> payload = ReadWholeFile(File(kUploadPayloadFile));
  if (!header || !payload) {
    DropPendingUpload();
    return std::nullopt;
  }
  PendingUpload p;
  std::string sha;
  std::istringstream lines(*header);
  bool parsed = true;
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos) {
      parsed = false;
      break;
    }
    const std::string key = line.substr(0, eq);
    const std::string value = line.substr(eq + 1);
    try {
      if (key == "client_id") p.header.client_id = value;
      if (key == "task_id") p.header.task_id = value;
      if (key == "base_version") p.header.base_version = std::stoull(value);
      if (key == "num_examples") p.header.num_examples = std::stoll(value);
      if (key == "local_steps") p.header.local_steps = std::stoll(value);
      if (key == "payload_sha256") sha = value;
      if (key == "codec") p.header.codec = value;
      if (key.rfind("metric.", 0) == 0) p.header.metrics[key.substr(7)] = std::stod(value);
    } catch (const std::exception&) {
      parsed = false;
      break;
    }
  }
  if (!parsed || p.header.task_id.empty() || sha != Sha256Hex(*payload)) {
    DropPendingUpload();
    return std::nullopt;
  }
  p.payload = std::move(*payload);
  return p;
}

Status ClientStateDir::SaveResidual(const ModelState& residual) {
  return WriteSafetensorsFile(File(kResidualFile), residual);
}

std::optional<ModelState> ClientStateDir::LoadResidual() const {
  Result<ModelState> r = ReadSafetensorsFile(File(kResidualFile));
  if (!r.ok()) return std::nullopt;
  return std::move(r).value();
}

void ClientStateDir::DropPendingUpload() {
  RemoveQuietly(File(kUploadHeaderFile));
  RemoveQuietly(File(kUploadPayloadFile));
}

}  // namespace plexus
