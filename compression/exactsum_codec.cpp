// exactsum: a sum of weighted deltas in int64 fixed point (aggregators/exact_sum.h), the form in
// which an edge aggregator sends its clients' partial sum to its parent (plexus server
// --upstream, issue 41); 8 bytes per value plus a 32-byte header. Encoding one delta makes the
// sum of that delta with weight 1. An edge's partial is followed by the list of the client updates
// in it (PartialContribution, aggregators/partial_sum_delta.h; EncodeContributions below). Read keeps the bytes as a
// PartialSumDelta, whose values are the sum's weighted mean; fedavg_exact folds its integers.
#include <memory>
#include <span>
#include <vector>

#include "aggregators/partial_sum_delta.h"
#include "aggregators/strategy_spec.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

constexpr uint8_t kId = 7;
constexpr size_t kSumHeaderBytes = 32;  // ExactSum::Encode's header

class ExactSumCodec final : public Codec {
 public:
  void EncodeTo(const ModelState& d, ModelState*, uint64_t, std::string* result) const override {
    ExactSum sum(d.num_params());
    // A delta the sum refuses (non-finite, beyond int64) is sent as an empty sum, which Read refuses.
    (void)sum.Add(d.data(), 1.0);
    *result = EncodePartialSum(sum);
  }
  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    PLEXUS_ASSIGN_OR_RETURN(std::shared_ptr<const CodedDelta> read, Read(std::string(b), layout));
    return read->Materialize(layout);
  }
  size_t EncodedSize(const ModelState& l) const override { return kHeaderBytes + kSumHeaderBytes + 8 * l.num_params(); }
  std::string Describe() const override { return kPartialSumCodec; }
  bool has_coded_form() const override { return true; }
  Result<std::shared_ptr<const CodedDelta>> Read(std::string bytes, const ModelState& layout) const override {
    PLEXUS_RETURN_IF_ERROR(CheckHeader(bytes, kId, layout.num_params()));
    // The sum, then the list of its contributions (none from a plain encoded delta).
    const size_t sum_bytes = kSumHeaderBytes + 8 * layout.num_params();
    const std::string_view payload = std::string_view(bytes).substr(kHeaderBytes);
    Result<ExactSum> sum = ExactSum::Decode(payload.substr(0, sum_bytes), layout.num_params());
    if (!sum.ok()) return CodecError(sum.status().message());
    std::vector<PartialContribution> contributions;
    if (payload.size() > sum_bytes) {
      Result<std::vector<PartialContribution>> listed = DecodeContributions(payload.substr(sum_bytes));
      if (!listed.ok()) return CodecError(listed.status().message());
      contributions = std::move(listed).value();
    }
    Result<std::shared_ptr<const PartialSumDelta>> partial = PartialSumDelta::Make(
        spec().empty() ? kPartialSumCodec : spec(), std::move(bytes), std::move(sum).value(), std::move(contributions));
    if (!partial.ok()) return CodecError(partial.status().message());
    return std::shared_ptr<const CodedDelta>(std::move(partial).value());
  }
};

}  // namespace

std::string EncodeContributions(std::span<const PartialContribution> contributions) {
  std::string out;
  Put<uint32_t>(out, static_cast<uint32_t>(contributions.size()));
  for (const PartialContribution& c : contributions) {
    for (const std::string* field : {&c.client_path, &c.task_id, &c.update_sha256}) PutString(out, *field);
  }
  return out;
}

Result<std::vector<PartialContribution>> DecodeContributions(std::string_view bytes) {
  constexpr uint32_t kLongestString = 1024;
  Reader r{bytes};
  uint32_t count = 0;
  if (!r.Get(&count)) return InvalidArgumentError("a partial sum's contributions: no count");
  // Each entry takes at least 12 bytes: a count beyond what the bytes can hold is refused before
  // anything is reserved for it.
  if (count > r.left() / 12) {
    return InvalidArgumentError("a partial sum's contributions: " + std::to_string(count) + " entries in " +
                                std::to_string(bytes.size()) + " bytes");
  }
  std::vector<PartialContribution> out(count);
  for (PartialContribution& c : out) {
    for (std::string* field : {&c.client_path, &c.task_id, &c.update_sha256}) {
      if (!r.String(field, kLongestString)) {
        return InvalidArgumentError("a partial sum's contributions: an entry is cut short or too long");
      }
    }
  }
  if (r.left() != 0) return InvalidArgumentError("a partial sum's contributions: bytes after the list");
  return out;
}

std::string EncodePartialSum(const ExactSum& sum, std::span<const PartialContribution> contributions) {
  std::string out;
  Header(&out, kId, sum.size());
  out += sum.Encode();
  if (!contributions.empty()) out += EncodeContributions(contributions);
  return out;
}

Result<std::unique_ptr<Codec>> MakeExactSumCodec(StrategySpec&, ThreadPool*) {
  return std::unique_ptr<Codec>(std::make_unique<ExactSumCodec>());
}

}  // namespace plexus
