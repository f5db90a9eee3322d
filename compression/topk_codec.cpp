// topk:ratio=R: the largest values in magnitude as (index, value) pairs, with error feedback; read
// as a CodedDelta.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

// top-k's bytes for `n` values checked: header, count, length, every index in range and above
// the one before it, every value finite.
Status CheckTopK(std::string_view b, size_t n) {
  PLEXUS_RETURN_IF_ERROR(CheckHeader(b, 4, n));
  if (b.size() < kHeaderBytes + 8) return CodecError("top-k payload without its count");
  const uint64_t k = Get<uint64_t>(b, kHeaderBytes);
  if (k > n) return CodecError("top-k count " + std::to_string(k) + " exceeds the " + std::to_string(n) + " values");
  PLEXUS_RETURN_IF_ERROR(CheckLength(b, 8 + 8 * k));
  size_t at = kHeaderBytes + 8;
  int64_t previous = -1;
  for (uint64_t j = 0; j < k; ++j, at += 8) {
    const uint32_t i = Get<uint32_t>(b, at);
    if (i >= n || static_cast<int64_t>(i) <= previous) {
      return CodecError("top-k index " + std::to_string(i) + " out of range or out of order");
    }
    previous = i;
    if (!std::isfinite(Get<float>(b, at + 4))) {
      return CodecError("top-k value at index " + std::to_string(i) + " is not finite");
    }
  }
  return Status::Ok();
}

// v[i] = value for every (i, value) pair of checked top-k bytes.
void ScatterTopK(std::string_view b, float* v) {
  const uint64_t k = Get<uint64_t>(b, kHeaderBytes);
  for (size_t at = kHeaderBytes + 8, end = at + 8 * k; at < end; at += 8)
    v[Get<uint32_t>(b, at)] = Get<float>(b, at + 4);
}

// A top-k delta read from checked bytes: (index, value) pairs in index order, zero elsewhere.
class CodedTopK final : public CodedDelta {
 public:
  CodedTopK(std::string codec, std::string bytes, size_t n)
      : codec_(std::move(codec)), bytes_(std::move(bytes)), n_(n), k_(Get<uint64_t>(bytes_, kHeaderBytes)) {}
  const std::string& codec() const override { return codec_; }
  const std::string& bytes() const override { return bytes_; }
  size_t num_values() const override { return n_; }
  void AddScaledTo(double* sum, size_t begin, size_t end, double w, bool first) const override {
    if (first) std::fill(sum + begin, sum + end, 0.0);
    // The first pair at or after `begin`: indices ascend.
    size_t lo = 0, hi = k_;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (Index(mid) < begin)
        lo = mid + 1;
      else
        hi = mid;
    }
    for (size_t j = lo; j < k_ && Index(j) < end; ++j) sum[Index(j)] += w * static_cast<double>(Value(j));
  }
  double SquaredNorm() const override {
    double total = 0.0;
    for (size_t j = 0; j < k_; ++j) total += static_cast<double>(Value(j)) * static_cast<double>(Value(j));
    return total;
  }
  ModelState Materialize(const ModelState& layout) const override {
    ModelState out = ModelState::ZerosLike(layout);
    ScatterTopK(bytes_, out.data().data());
    out.MarkCheckedFinite();
    return out;
  }

 private:
  size_t Index(size_t j) const { return Get<uint32_t>(bytes_, kHeaderBytes + 8 + 8 * j); }
  float Value(size_t j) const { return Get<float>(bytes_, kHeaderBytes + 12 + 8 * j); }

  const std::string codec_, bytes_;
  const size_t n_;
  const uint64_t k_;
};

// A value's magnitude as an integer key: its bits without the sign. For every float that is not
// NaN the keys order as the magnitudes do (+0 and -0 both 0, subnormals below normals, infinity
// above them); a NaN's key is above infinity's.
inline uint32_t MagnitudeKey(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

// The indices of the k largest magnitudes of v, ties to the lower index, in ascending order:
// the k first of v's indices ordered by (magnitude descending, index ascending). A radix select on
// the keys instead of sorting indices: one pass counts the keys' high 16 bits, which names the
// bucket holding the k-th largest key; a second counts that bucket's low 16 bits, which names the
// key itself (the threshold) and how many equal to it are taken; a third takes, in index order,
// every key above the threshold and the first of those equal to it. Three streaming passes with
// counters in cache, where comparing indices through the values jumps all over memory.
// REQUIRES: k <= v.size().
std::vector<uint32_t> LargestMagnitudes(std::span<const float> v, size_t k) {
  std::vector<uint32_t> taken;
  if (k == 0) return taken;
  const size_t n = v.size();
  std::vector<uint32_t> count(size_t{1} << 16);
  for (size_t i = 0; i < n; ++i) ++count[MagnitudeKey(v[i]) >> 16];
  // From the top bucket down, until the k-th key falls in one; `above` keys are in higher buckets.
  size_t above = 0;
  uint32_t high = 0xffff;
  while (above + count[high] < k) above += count[high--];
  std::fill(count.begin(), count.end(), 0u);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t key = MagnitudeKey(v[i]);
    if ((key >> 16) == high) ++count[key & 0xffff];
  }
  uint32_t low = 0xffff;
  while (above + count[low] < k) above += count[low--];
  const uint32_t threshold = (high << 16) | low;
  size_t equal_left = k - above;  // keys equal to the threshold still to take, lowest index first
  taken.reserve(k);
  for (size_t i = 0; i < n && taken.size() < k; ++i) {
    const uint32_t key = MagnitudeKey(v[i]);
    if (key > threshold) {
      taken.push_back(static_cast<uint32_t>(i));
    } else if (key == threshold && equal_left > 0) {
      taken.push_back(static_cast<uint32_t>(i));
      --equal_left;
    }
  }
  return taken;
}

class TopKCodec final : public Codec {
 public:
  explicit TopKCodec(double ratio) : ratio_(ratio) {}
  void EncodeTo(const ModelState& d, ModelState* residual, uint64_t, std::string* result) const override {
    std::span<const float> delta = d.data();
    const size_t n = delta.size();
    // What may be sent: the delta, plus with error feedback what earlier deltas left, summed in
    // the residual's own memory (no copy of the model; the residual becomes what is left).
    std::span<const float> v = delta;
    const bool feedback = residual && residual->num_params() == n;
    if (feedback) {
      std::span<float> r = residual->data();
      for (size_t i = 0; i < n; ++i) r[i] += delta[i];
      v = r;
    }
    const std::vector<uint32_t> idx = LargestMagnitudes(v, std::min(K(n), n));
    std::string& out = Header(result, 4, n);
    out.reserve(EncodedSize(d));
    Put<uint64_t>(out, idx.size());
    for (uint32_t i : idx) {
      Put<uint32_t>(out, i);
      Put<float>(out, v[i]);
    }
    if (feedback) {  // what was not sent waits for the next delta
      std::span<float> r = residual->data();
      for (uint32_t i : idx) r[i] = 0.0f;
    }
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckTopK(b, layout.num_params()));
    ModelState out = ModelState::ZerosLike(layout);
    ScatterTopK(b, out.data().data());
    out.MarkCheckedFinite();
    return out;
  }
  bool has_coded_form() const override { return true; }
  Result<std::shared_ptr<const CodedDelta>> Read(std::string b, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckTopK(b, layout.num_params()));
    return std::shared_ptr<const CodedDelta>(std::make_shared<CodedTopK>(spec(), std::move(b), layout.num_params()));
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + 8 + 8 * K(l.num_params()); }
  std::string Describe() const override { return "topk(ratio=" + std::to_string(ratio_) + ")"; }
  bool uses_residual() const override { return true; }

 private:
  size_t K(size_t n) const {
    return std::clamp<size_t>(static_cast<size_t>(std::ceil(ratio_ * static_cast<double>(n))), 1,
                              std::max<size_t>(n, 1));
  }
  const double ratio_;
};

}  // namespace

Result<std::unique_ptr<Codec>> MakeTopKCodec(StrategySpec& spec, ThreadPool*) {
  PLEXUS_ASSIGN_OR_RETURN(const double ratio, spec.GetDouble("ratio", 0.01));
  if (!(ratio > 0 && ratio <= 1)) return InvalidArgumentError("topk:ratio must be in (0, 1]");
  return std::unique_ptr<Codec>(std::make_unique<TopKCodec>(ratio));
}

}  // namespace plexus
