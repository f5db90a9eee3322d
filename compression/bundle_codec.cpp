// bundle: the client updates an edge aggregator forwards raw to its parent (plexus server
// --upstream-forward raw, issue 41), read as an UpdateBundle (aggregators/update_bundle.h). After
// the codec header: a uint32 count, then per update its client path, task id (uint32 length and
// bytes each), examples and local steps (int64), train loss (double; NaN: none), the codec its
// values are in (uint32 length and bytes; empty: float32) and its values (uint64 length and bytes:
// 4 bytes per value for float32, else that codec's bytes). A bundle inside a bundle is flattened
// when it is encoded; partial sums are not bundled (a bundle holds client updates only).
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <span>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "aggregators/update_bundle.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

constexpr uint8_t kId = 8;
constexpr uint32_t kLongestName = 1024;

void AppendUpdate(std::string& out, const Update& u, const std::string& path) {
  PutString(out, path);
  PutString(out, u.task_id);
  Put<int64_t>(out, u.num_examples);
  Put<int64_t>(out, u.local_steps);
  const auto loss = u.metrics.find("train_loss");
  Put<double>(out, loss == u.metrics.end() ? std::numeric_limits<double>::quiet_NaN() : loss->second);
  if (u.coded) {
    PutString(out, u.coded->codec());
    Put<uint64_t>(out, u.coded->bytes().size());
    out.append(u.coded->bytes());
  } else {
    PutString(out, "");
    const std::span<const float> v = u.delta.data();
    Put<uint64_t>(out, v.size() * sizeof(float));
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
  }
}

// Appends `u`, or the updates of a bundle `u` carries under its path; counts what it appended.
void AppendFlattened(std::string& out, const Update& u, const std::string& path, uint32_t* count) {
  if (const auto* inner = dynamic_cast<const UpdateBundle*>(u.coded.get())) {
    for (const Update& v : inner->updates()) AppendFlattened(out, v, path + "/" + v.client_id, count);
    return;
  }
  AppendUpdate(out, u, path);
  ++*count;
}

class BundleCodec final : public Codec {
 public:
  // One anonymous float32 update (what encoding a single delta means for this codec).
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    Update u;
    u.client_id = "delta";
    u.num_examples = 1;
    u.delta = d;
    *result = EncodeUpdateBundle(std::span<const Update>(&u, 1), d.num_params());
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_ASSIGN_OR_RETURN(std::shared_ptr<const CodedDelta> read, Read(std::string(b), layout));
    return read->Materialize(layout);
  }
  // The size of EncodeTo's bundle of one update (a bundle's size depends on what it holds): the
  // count, the path "delta", an empty task, examples, steps, loss, an empty codec, the values.
  size_t EncodedSize(const ModelState& l) const override {
    return kHeaderBytes + 4 + (4 + 5) + 4 + 8 + 8 + 8 + 4 + 8 + 4 * l.num_params();
  }
  std::string Describe() const override { return kUpdateBundleCodec; }
  bool has_coded_form() const override { return true; }

  Result<std::shared_ptr<const CodedDelta>> Read(std::string bytes, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(bytes, kId, layout.num_params()));
    Reader r{std::string_view(bytes), kHeaderBytes};
    uint32_t count = 0;
    if (!r.Get(&count)) return CodecError("a bundle without its count");
    std::vector<Update> updates;
    for (uint32_t k = 0; k < count; ++k) {
      Update u;
      double loss = 0;
      std::string codec;
      uint64_t length = 0;
      std::string_view values;
      if (!r.String(&u.client_id, kLongestName) || !r.String(&u.task_id, kLongestName) || !r.Get(&u.num_examples) ||
          !r.Get(&u.local_steps) || !r.Get(&loss) || !r.String(&codec, kLongestName) || !r.Get(&length) ||
          !r.Take(length, &values)) {
        return CodecError("bundled update " + std::to_string(k) + " is cut short or has a name too long");
      }
      const std::string who = "bundled update " + std::to_string(k) + " (" + u.client_id + ")";
      if (u.client_id.empty() || u.num_examples <= 0 || u.local_steps < 0) {
        return CodecError(who + ": no client, or no examples, or negative steps");
      }
      if (std::isfinite(loss)) u.metrics["train_loss"] = loss;
      if (codec.empty()) {
        if (length != 4 * layout.num_params()) return CodecError(who + ": not one float32 value per parameter");
        u.delta = ModelState::UninitializedLike(layout);
        std::memcpy(u.delta.data().data(), values.data(), length);
        for (float x : u.delta.data()) {
          if (!std::isfinite(x)) return CodecError(who + ": a non-finite value");
        }
        u.delta.MarkCheckedFinite();
      } else {
        const std::string name = CodecNameOf(codec);
        if (name == kUpdateBundleCodec || name == kPartialSumCodec) {
          return CodecError(who + ": a bundle holds client updates only, not " + name);
        }
        Result<std::unique_ptr<Codec>> inner = MakeCodec(codec);
        if (!inner.ok()) return CodecError(who + ": " + inner.status().message());
        if ((*inner)->has_coded_form()) {
          Result<std::shared_ptr<const CodedDelta>> read = (*inner)->Read(std::string(values), layout);
          if (!read.ok()) return CodecError(who + ": " + read.status().message());
          u.coded = std::move(read).value();
        } else {
          Result<ModelState> decoded = (*inner)->Decode(values, layout);
          if (!decoded.ok()) return CodecError(who + ": " + decoded.status().message());
          u.delta = std::move(decoded).value();
        }
      }
      updates.push_back(std::move(u));
    }
    if (r.left() != 0) return CodecError("bytes after the bundle's last update");
    Result<std::shared_ptr<const UpdateBundle>> bundle = UpdateBundle::Make(
        spec().empty() ? kUpdateBundleCodec : spec(), std::move(bytes), layout.num_params(), std::move(updates));
    if (!bundle.ok()) return CodecError(bundle.status().message());
    return std::shared_ptr<const CodedDelta>(std::move(bundle).value());
  }
};

}  // namespace

std::string EncodeUpdateBundle(std::span<const Update> updates, size_t values) {
  std::string out;
  Header(&out, kId, values);
  const size_t count_at = out.size();
  Put<uint32_t>(out, 0);
  uint32_t count = 0;
  for (const Update& u : updates) AppendFlattened(out, u, u.client_id, &count);
  std::memcpy(out.data() + count_at, &count, sizeof count);
  return out;
}

Result<std::unique_ptr<Codec>> MakeBundleCodec(StrategySpec&, ThreadPool*) {
  return std::unique_ptr<Codec>(std::make_unique<BundleCodec>());
}

}  // namespace plexus
