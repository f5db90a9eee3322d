#include "client/client_state_dir.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
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
constexpr char kOptimizerFile[] = "optimizer.safetensors";

void RemoveQuietly(const std::string& path) {
  std::error_code ignored;
  std::filesystem::remove(path, ignored);
}

bool OneLine(const std::string& s) { return s.find('\n') == std::string::npos; }

constexpr uint64_t kSmallFileBytes = 64 << 10;  // the client id, an upload's header

// Why the open file `fd` may not be used, or "" when it may.
std::string Untrusted(int fd, uint64_t max_bytes, uint64_t* size) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return std::string("cannot stat it: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != geteuid()) return "owned by user " + std::to_string(st.st_uid) + ", not this client's";
  *size = static_cast<uint64_t>(st.st_size);
  if (*size > max_bytes)
    return std::to_string(*size) + " bytes, more than the " + std::to_string(max_bytes) + " it may hold";
  return "";
}

}  // namespace

Result<std::unique_ptr<ClientStateDir>> ClientStateDir::Open(const std::string& dir, uint64_t max_model_bytes) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return InvalidArgumentError("cannot create the state directory '" + dir + "': " + ec.message());
  std::unique_ptr<ClientStateDir> state(new ClientStateDir(dir, max_model_bytes));
  // Fails early (at start, with a clear message) rather than at the first download.
  const std::string probe = state->File(".probe");
  if (Status s = WriteFileAtomically(probe, {"ok"}); !s.ok()) {
    return InvalidArgumentError("the state directory '" + dir + "' is not writable: " + s.message());
  }
  RemoveQuietly(probe);
  return state;
}

std::optional<std::string> ClientStateDir::ReadKept(const std::string& path, uint64_t max_bytes) const {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    spdlog::warn("state directory: dropping '{}': {}", path, errno == ELOOP ? "a symbolic link" : std::strerror(errno));
    RemoveQuietly(path);
    return std::nullopt;
  }
  uint64_t size = 0;
  std::string why = Untrusted(fd, max_bytes, &size);
  std::string bytes;
  if (why.empty()) {
    bytes.resize(size);
    size_t done = 0;
    while (done < size) {
      const ssize_t n = ::read(fd, bytes.data() + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    if (done != size) why = "it could not be read whole";
  }
  ::close(fd);
  if (!why.empty()) {
    spdlog::warn("state directory: dropping '{}': {}", path, why);
    RemoveQuietly(path);
    return std::nullopt;
  }
  return bytes;
}

std::string ClientStateDir::ClientId() const {
  std::optional<std::string> id = ReadKept(File(kIdFile), kSmallFileBytes);
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
  if (std::optional<std::string> whole = ReadKept(ModelFile(version, true), max_model_bytes_)) {
    *complete = true;
    return std::move(*whole);
  }
  *complete = false;
  return ReadKept(ModelFile(version, false), max_model_bytes_).value_or("");
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
  // Never through a symbolic link (one planted here once had the client append a model to
  // /etc/passwd), and only to a regular file of this user's.
  const int flags = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | (at_offset == 0 ? O_TRUNC : O_APPEND);
  const int fd = ::open(path.c_str(), flags, 0600);
  if (fd < 0) {
    return UnavailableError("cannot write '" + path +
                            "': " + (errno == ELOOP ? "a symbolic link" : std::strerror(errno)));
  }
  uint64_t size = 0;
  std::string why = Untrusted(fd, max_model_bytes_, &size);
  if (why.empty() && at_offset + bytes.size() > max_model_bytes_) why = "the model would exceed the limit";
  if (!why.empty()) {
    ::close(fd);
    return FailedPreconditionError("'" + path + "': " + why);
  }
  if (size != at_offset) {
    ::close(fd);
    return FailedPreconditionError("'" + path + "' holds " + std::to_string(size) + " bytes, not " +
                                   std::to_string(at_offset));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  const int write_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (done != bytes.size() || !closed) {
    return UnavailableError("cannot write '" + path + "': " + std::strerror(write_errno));
  }
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

Status ClientStateDir::SavePendingUpload(const UploadHeader& h, const Payload& payload) {
  if (!OneLine(h.client_id) || !OneLine(h.task_id) || !OneLine(h.codec)) {
    return InvalidArgumentError("an id or codec with a line break");
  }
  std::ostringstream header;
  header.precision(17);
  header << "client_id=" << h.client_id << "\ntask_id=" << h.task_id << "\nbase_version=" << h.base_version
         << "\nnum_examples=" << h.num_examples << "\nlocal_steps=" << h.local_steps
         << "\npayload_sha256=" << payload.Sha256Hex() << "\ncodec=" << h.codec << "\n";
  for (const auto& [name, value] : h.metrics) {
    if (!OneLine(name) || name.find('=') != std::string::npos) continue;
    header << "metric." << name << "=" << value << "\n";
  }
  // The header goes last: a payload without a header is an unfinished save, and is ignored.
  RemoveQuietly(File(kUploadHeaderFile));
  PLEXUS_RETURN_IF_ERROR(WriteFileAtomically(File(kUploadPayloadFile), {payload.head(), payload.body()}));
  return WriteFileAtomically(File(kUploadHeaderFile), {header.str()});
}

std::optional<PendingUpload> ClientStateDir::LoadPendingUpload() {
  std::optional<std::string> header = ReadKept(File(kUploadHeaderFile), kSmallFileBytes);
  std::optional<std::string> payload = ReadKept(File(kUploadPayloadFile), max_model_bytes_);
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
  const std::string path = File(kResidualFile);
  std::optional<std::string> bytes = ReadKept(path, max_model_bytes_);
  if (!bytes) return std::nullopt;
  Result<ModelState> r = DecodeSafetensors(*bytes);
  std::string why = r.ok() ? "" : r.status().message();
  if (r.ok()) {
    for (float v : r->data()) {
      if (!(std::fabs(v) <= kMaxResidualValue)) {  // NaN too
        why = "a value of " + std::to_string(v) + " (not finite, or beyond the range a residual holds)";
        break;
      }
    }
  }
  if (!why.empty()) {
    spdlog::warn("state directory: dropping the top-k residual '{}': {}", path, why);
    RemoveQuietly(path);
    return std::nullopt;
  }
  return std::move(r).value();
}

// The two moments as tensors of a safetensors file, the step count as its version.
Status ClientStateDir::SaveOptimizerState(const OptimizerState& state) {
  const auto n = static_cast<int64_t>(state.first_moment.size());
  PLEXUS_ASSIGN_OR_RETURN(ModelState kept, ModelState::Create({{"first_moment", {n}}, {"second_moment", {n}}}));
  std::copy(state.first_moment.begin(), state.first_moment.end(), kept.tensor(0).begin());
  std::copy(state.second_moment.begin(), state.second_moment.end(), kept.tensor(1).begin());
  kept.set_version(static_cast<uint64_t>(state.steps));
  return WriteSafetensorsFile(File(kOptimizerFile), kept);
}

std::optional<OptimizerState> ClientStateDir::LoadOptimizerState() const {
  const std::string path = File(kOptimizerFile);
  std::optional<std::string> bytes = ReadKept(path, 2 * max_model_bytes_);
  if (!bytes) return std::nullopt;
  Result<ModelState> r = DecodeSafetensors(*bytes);
  std::string why = r.ok() ? "" : r.status().message();
  if (r.ok() && (r->tensors().size() != 2 || r->tensors()[0].name != "first_moment" ||
                 r->tensors()[1].name != "second_moment" || r->tensor(0).size() != r->tensor(1).size())) {
    why = "not two moments of one size";
  }
  if (why.empty()) {
    for (float v : r->tensor(0)) {
      if (!std::isfinite(v)) why = "a first moment that is not finite";
    }
    for (float v : r->tensor(1)) {
      if (!(v >= 0 && std::isfinite(v))) why = "a second moment that is negative or not finite";
    }
  }
  if (!why.empty()) {
    spdlog::warn("state directory: dropping the optimizer state '{}': {}", path, why);
    RemoveQuietly(path);
    return std::nullopt;
  }
  OptimizerState state;
  state.steps = static_cast<int64_t>(r->version());
  state.first_moment.assign(r->tensor(0).begin(), r->tensor(0).end());
  state.second_moment.assign(r->tensor(1).begin(), r->tensor(1).end());
  return state;
}

void ClientStateDir::DropPendingUpload() {
  RemoveQuietly(File(kUploadHeaderFile));
  RemoveQuietly(File(kUploadPayloadFile));
}

}  // namespace plexus
