#include "aggregators/partial_sum_delta.h"

#include "aggregators/update_bundle.h"

#include <cstdint>
#include <cstring>

namespace plexus {

namespace {

constexpr uint32_t kLongestString = 1024;

void PutU32(std::string& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// Reads a uint32 at `at`, moving past it; false when fewer than 4 bytes are left.
bool GetU32(std::string_view bytes, size_t& at, uint32_t* v) {
  if (bytes.size() - at < 4) return false;
  *v = 0;
  for (int i = 0; i < 4; ++i) *v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  at += 4;
  return true;
}

}  // namespace

std::string EncodeContributions(std::span<const PartialContribution> contributions) {
  std::string out;
  PutU32(out, static_cast<uint32_t>(contributions.size()));
  for (const PartialContribution& c : contributions) {
    for (const std::string* field : {&c.client_path, &c.task_id, &c.update_sha256}) {
      PutU32(out, static_cast<uint32_t>(field->size()));
      out += *field;
    }
  }
  return out;
}

Result<std::vector<PartialContribution>> DecodeContributions(std::string_view bytes) {
  size_t at = 0;
  uint32_t count = 0;
  if (!GetU32(bytes, at, &count)) return InvalidArgumentError("a partial sum's contributions: no count");
  // Each entry takes at least 12 bytes: a count beyond what the bytes can hold is refused before
  // anything is reserved for it.
  if (count > (bytes.size() - at) / 12) {
    return InvalidArgumentError("a partial sum's contributions: " + std::to_string(count) + " entries in " +
                                std::to_string(bytes.size()) + " bytes");
  }
  std::vector<PartialContribution> out(count);
  for (PartialContribution& c : out) {
    for (std::string* field : {&c.client_path, &c.task_id, &c.update_sha256}) {
      uint32_t length = 0;
      if (!GetU32(bytes, at, &length) || length > kLongestString || bytes.size() - at < length) {
        return InvalidArgumentError("a partial sum's contributions: an entry is cut short or too long");
      }
      field->assign(bytes.substr(at, length));
      at += length;
    }
  }
  if (at != bytes.size()) return InvalidArgumentError("a partial sum's contributions: bytes after the list");
  return out;
}

std::vector<MergedUpdate> MergedEntriesOf(const Update& update, bool hash) {
  if (const auto* bundle = dynamic_cast<const UpdateBundle*>(update.coded.get())) {  // each under its path
    std::vector<MergedUpdate> out;
    for (const Update& inner : bundle->updates()) {
      for (MergedUpdate& m : MergedEntriesOf(inner, hash)) {
        m.client_id = update.client_id + "/" + m.client_id;
        out.push_back(std::move(m));
      }
    }
    return out;
  }
  const auto* partial = dynamic_cast<const PartialSumDelta*>(update.coded.get());
  if (partial == nullptr || partial->contributions().empty()) {
    MergedUpdate m{update.client_id, update.task_id};
    if (hash && partial == nullptr) {
      m.update_sha256 = update.coded ? Sha256Hex(update.coded->bytes()) : update.delta.ContentSha256();
    }
    return {std::move(m)};
  }
  std::vector<MergedUpdate> out;
  out.reserve(partial->contributions().size());
  for (const PartialContribution& c : partial->contributions()) {
    MergedUpdate m{update.client_id + "/" + c.client_path, c.task_id};
    m.update_sha256 = c.update_sha256;
    out.push_back(std::move(m));
  }
  return out;
}

Result<std::shared_ptr<const PartialSumDelta>> PartialSumDelta::Make(std::string codec, std::string bytes, ExactSum sum,
                                                                     std::vector<PartialContribution> contributions) {
  if (sum.empty()) return InvalidArgumentError("a partial sum of no updates");
  std::vector<float> mean(sum.size());
  PLEXUS_RETURN_IF_ERROR(sum.MeanInto(mean));
  return std::shared_ptr<const PartialSumDelta>(new PartialSumDelta(std::move(codec), std::move(bytes), std::move(sum),
                                                                    std::move(mean), std::move(contributions)));
}

void PartialSumDelta::AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const {
  const float* v = mean_.data();
  if (first) {
    for (size_t i = begin; i < end; ++i) sum[i] = w * static_cast<double>(v[i]);
  } else {
    for (size_t i = begin; i < end; ++i) sum[i] += w * static_cast<double>(v[i]);
  }
}

double PartialSumDelta::SquaredNorm() const {
  double s = 0;
  for (float x : mean_) s += static_cast<double>(x) * static_cast<double>(x);
  return s;
}

ModelState PartialSumDelta::Materialize(const ModelState& layout) const {
  ModelState out = ModelState::UninitializedLike(layout);
  std::memcpy(out.data().data(), mean_.data(), mean_.size() * sizeof(float));
  return out;
}

}  // namespace plexus
