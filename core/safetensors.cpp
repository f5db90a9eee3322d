#include "core/safetensors.h"

#include "core/atomic_file.h"
#include "core/crc32c.h"
#include "core/model_content.h"
#include "core/value_bytes.h"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>

namespace plexus {
namespace {

constexpr const char* kVersionKey = "plexus.version";

Status Malformed(const std::string& why) { return InvalidArgumentError("malformed safetensors: " + why); }

// The 8-byte header length of a `total`-byte input: within the input and the limit.
// REQUIRES: total >= 8.
Status CheckHeaderLength(uint64_t header_len, uint64_t total) {
  if (header_len > kMaxSafetensorsHeaderBytes || header_len > total - 8) {
    return Malformed("header length " + std::to_string(header_len) + " exceeds the " + std::to_string(total) +
                     "-byte input or the limit");
  }
  return Status::Ok();
}

// A safetensors header nests three levels deep (object, tensor entry, shape array). Deeper input is
// refused before it is parsed: the JSON library and its dump() recurse on nesting, so an
// attacker-chosen depth would be an attacker-chosen stack depth.
constexpr int kMaxHeaderNesting = 8;

bool NestsDeeperThan(std::string_view json, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > max_depth) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

// A short rendering of a JSON value for an error message.
std::string Excerpt(const nlohmann::json& value) {
  std::string text = value.dump();
  if (text.size() > 40) text = text.substr(0, 37) + "...";
  return text;
}

}  // namespace

namespace {

std::string Prefix(const ModelState& model, const std::map<std::string, std::string>& metadata, size_t alignment) {
  nlohmann::json header = nlohmann::json::object();
  header["__metadata__"] = {{kVersionKey, std::to_string(model.version())}, {"format", "pt"}};
  for (const auto& [key, value] : metadata) header["__metadata__"][key] = value;
  for (const TensorSlot& s : model.tensors()) {
    const size_t begin = s.offset * sizeof(float);
    header[s.name] = {{"dtype", "F32"}, {"shape", s.shape}, {"data_offsets", {begin, begin + s.numel * sizeof(float)}}};
  }
  std::string json = header.dump();
  // Pad with spaces (the format allows them after the JSON) so that the data section starts
  // aligned: the reference writer aligns to 8.
  json.append((alignment - (8 + json.size()) % alignment) % alignment, ' ');
  const uint64_t n = json.size();
  std::string out;
  out.reserve(8 + json.size());
  out.append(reinterpret_cast<const char*>(&n), 8);
  out += json;
  return out;
}

}  // namespace

std::string SafetensorsPrefix(const ModelState& model) { return Prefix(model, {}, 8); }

std::string SafetensorsPrefix(const ModelState& model, const std::map<std::string, std::string>& metadata) {
  return Prefix(model, metadata, 8);
}

std::string SafetensorsPrefixAlignedTo(const ModelState& model, size_t alignment) {
  return Prefix(model, {}, std::max<size_t>(alignment, 8));
}

std::string EncodeSafetensors(const ModelState& model) {
  const std::string prefix = SafetensorsPrefix(model);
  std::string out;
  out.reserve(prefix.size() + model.num_bytes());
  out += prefix;
  out += ValueBytes(model);
  return out;
}

Result<ModelState> SafetensorsLayout(std::string_view header_json, uint64_t data_bytes) {
  if (NestsDeeperThan(header_json, kMaxHeaderNesting)) {
    return Malformed("header nests deeper than " + std::to_string(kMaxHeaderNesting) + " levels");
  }
  nlohmann::json header = nlohmann::json::parse(header_json, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) return Malformed("header is not a JSON object");

  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  uint64_t version = 0;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Malformed("__metadata__ is not an object");
      auto v = it->find(kVersionKey);
      if (v != it->end()) {
        if (!v->is_string()) return Malformed("plexus.version is not a string");
        const std::string& text = v->get_ref<const std::string&>();
        char* end = nullptr;
        errno = 0;
        version = std::strtoull(text.c_str(), &end, 10);
        if (text.empty() || *end != '\0' || errno != 0)
          return Malformed("plexus.version '" + text + "' is not a number");
      }
      continue;
    }
    const nlohmann::json& t = *it;
    if (!t.is_object()) return Malformed("entry '" + it.key() + "' is not an object");
    auto dtype = t.find("dtype");
    auto shape = t.find("shape");
    auto offsets = t.find("data_offsets");
    if (dtype == t.end() || shape == t.end() || offsets == t.end()) {
      return Malformed("tensor '" + it.key() + "' lacks dtype, shape or data_offsets");
    }
    if (!dtype->is_string() || *dtype != "F32") {
      return InvalidArgumentError("tensor '" + it.key() + "' has dtype " + Excerpt(*dtype) +
                                  "; Plexus reads F32 only (convert with tensor.float())");
    }
    Entry e{it.key(), {}, 0, 0};
    if (!shape->is_array()) return Malformed("shape of '" + e.name + "' is not an array");
    uint64_t numel = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned() && !(d.is_number_integer() && d.get<int64_t>() >= 0)) {
        return Malformed("shape of '" + e.name + "' has a non-integer or negative dimension");
      }
      const uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 40) || (dim != 0 && numel > (uint64_t{1} << 40) / dim))
        return Malformed("shape of '" + e.name + "' is too large");
      numel *= dim;
      e.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return Malformed("data_offsets of '" + e.name + "' is not a pair of non-negative integers");
    }
    e.begin = (*offsets)[0].get<uint64_t>();
    e.end = (*offsets)[1].get<uint64_t>();
    if (e.begin > e.end || e.end > data_bytes) {
      return Malformed("data_offsets of '" + e.name + "' lie outside the " + std::to_string(data_bytes) + "-byte data");
    }
    if (e.end - e.begin != numel * sizeof(float)) {
      return Malformed("tensor '" + e.name + "' has " + std::to_string(e.end - e.begin) + " bytes for " +
                       std::to_string(numel) + " F32 values");
    }
    entries.push_back(std::move(e));
  }
  // The data section order is the model's tensor order.
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected) return Malformed("tensor '" + e.name + "' overlaps another or leaves a gap");
    expected = e.end;
  }
  if (expected != data_bytes) return Malformed("data section has trailing bytes");

  std::vector<TensorSpec> specs;
  specs.reserve(entries.size());
  for (const Entry& e : entries) specs.push_back({e.name, e.shape});
  return ModelState::CreateUninitialized(specs, version);  // the caller writes every value
}

Result<ModelState> DecodeSafetensors(std::string_view bytes) {
  if (bytes.size() < 8) return Malformed("shorter than the 8-byte header length");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  PLEXUS_RETURN_IF_ERROR(CheckHeaderLength(header_len, bytes.size()));
  const std::string_view payload = bytes.substr(8 + header_len);
  PLEXUS_ASSIGN_OR_RETURN(ModelState model, SafetensorsLayout(bytes.substr(8, header_len), payload.size()));
  if (!payload.empty()) std::memcpy(model.data().data(), payload.data(), payload.size());
  return model;
}

Status SafetensorsStreamDecoder::Append(std::string_view bytes) {
  if (bytes.size() > total_bytes_ - received_) {
    return Malformed("the stream carries more than its announced " + std::to_string(total_bytes_) + " bytes");
  }
  received_ += bytes.size();
  // The header first: its 8-byte length, then the JSON, then the model is laid out.
  while (!model_ && !bytes.empty()) {
    const size_t want = (header_.size() < 8 ? 8 : 8 + header_len_) - header_.size();
    const size_t take = std::min(bytes.size(), want);
    header_.append(bytes.substr(0, take));
    bytes.remove_prefix(take);
    if (header_.size() == 8 && take == want) {
      std::memcpy(&header_len_, header_.data(), 8);
      PLEXUS_RETURN_IF_ERROR(CheckHeaderLength(header_len_, total_bytes_));
    }
    if (header_.size() >= 8 && header_.size() == 8 + header_len_) {
      PLEXUS_ASSIGN_OR_RETURN(ModelState m,
                              SafetensorsLayout(std::string_view(header_).substr(8), total_bytes_ - header_.size()));
      model_.emplace(std::move(m));
      if (crc_wanted_) crc_ = ContentHeadCrc32c(*model_);
    }
  }
  if (!bytes.empty()) {
    float* values = model_->data_.data();
    char* const to = reinterpret_cast<char*>(values) + data_received_;
    if (bytes.data() != to) std::memcpy(to, bytes.data(), bytes.size());  // else written there in place
    // Check the values this piece completed while they are in cache (a piece may end inside one).
    const size_t first = data_received_ / sizeof(float);
    data_received_ += bytes.size();
    const size_t end = data_received_ / sizeof(float);
    if (!AllFinite(std::span<const float>(values + first, end - first))) non_finite_ = true;
    if (crc_wanted_) crc_ = ExtendCrc32c(crc_, std::string_view(to, bytes.size()));
  }
  return Status::Ok();
}

std::optional<uint32_t> SafetensorsStreamDecoder::ContentCrc32c() const {
  if (!crc_wanted_ || !model_ || received_ != total_bytes_) return std::nullopt;
  return crc_;
}

std::span<char> SafetensorsStreamDecoder::Destination(size_t bytes) {
  if (!model_ || bytes > total_bytes_ - received_) return {};
  return {reinterpret_cast<char*>(model_->data_.data()) + data_received_, bytes};
}

Result<ModelState> SafetensorsStreamDecoder::Finish() && {
  if (received_ != total_bytes_ || !model_) {
    return Malformed("stream ended after " + std::to_string(received_) + " of " + std::to_string(total_bytes_) +
                     " bytes");
  }
  model_->finite_checked_ = !non_finite_;
  return std::move(*model_);
}

std::string SafetensorsStreamDecoder::ReceivedSha256() const {
  const std::string_view data = model_ ? ValueBytes(*model_).substr(0, data_received_) : std::string_view();
  return Sha256Hex({std::string_view(header_), data});
}

namespace {

// Reads exactly `n` bytes at the file's position into `out`. Unavailable on a read error,
// InvalidArgument (malformed) when the file ends first.
Status ReadFully(int fd, char* out, size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t got = ::read(fd, out, n);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return UnavailableError("cannot read '" + path + "': " + std::strerror(errno));
    if (got == 0) return Malformed("the file ended early");
    out += got;
    n -= static_cast<size_t>(got);
  }
  return Status::Ok();
}

Result<ModelState> ReadSafetensorsFd(int fd, uint64_t size, const std::string& path) {
  if (size < 8) return Malformed("shorter than the 8-byte header length");
  uint64_t header_len = 0;
  PLEXUS_RETURN_IF_ERROR(ReadFully(fd, reinterpret_cast<char*>(&header_len), 8, path));
  PLEXUS_RETURN_IF_ERROR(CheckHeaderLength(header_len, size));
  std::string header(header_len, '\0');
  PLEXUS_RETURN_IF_ERROR(ReadFully(fd, header.data(), header.size(), path));
  PLEXUS_ASSIGN_OR_RETURN(ModelState model, SafetensorsLayout(header, size - 8 - header_len));
  // The values straight into the model, a quarter megabyte at a time, each piece checked finite
  // while it is in cache: no staging buffer, no second copy.
  constexpr size_t kPiece = size_t{256} << 10;
  char* values = reinterpret_cast<char*>(model.data().data());
  const size_t total = model.num_bytes();
  bool finite = true;
  for (size_t done = 0; done < total;) {
    const size_t n = std::min(kPiece, total - done);
    PLEXUS_RETURN_IF_ERROR(ReadFully(fd, values + done, n, path));
    finite = finite && AllFinite(std::span<const float>(model.data().data() + done / sizeof(float), n / sizeof(float)));
    done += n;
  }
  if (finite) model.MarkCheckedFinite();
  return model;
}

}  // namespace

Result<ModelState> ReadSafetensorsFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("cannot open model file '" + path + "': " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return UnavailableError("cannot stat '" + path + "': " + std::strerror(err));
  }
  Result<ModelState> model = ReadSafetensorsFd(fd, static_cast<uint64_t>(st.st_size), path);
  ::close(fd);
  if (!model.ok()) return model.status().WithContext("reading '" + path + "'");
  return model;
}

Status WriteSafetensorsFile(const std::string& path, const ModelState& model,
                            const std::map<std::string, std::string>& metadata) {
  // The header, then the values straight from the model: no encoded copy of a model-sized buffer.
  return WriteFileAtomically(path, {SafetensorsPrefix(model, metadata), ValueBytes(model)});
}

}  // namespace plexus
