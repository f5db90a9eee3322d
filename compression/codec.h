// Codec: a compressed wire form for deltas (`--codec SPEC`). Encode turns a delta into bytes,
// Decode turns bytes back into a delta of a given layout, checking every size, index and scale
// before touching memory. Specs:
//   f32                 the float32 values as they are (the baseline: 4 bytes per value)
//   fp16, bf16          16-bit floats, round to nearest even (2 bytes per value)
//   int8[:chunk=C]      per chunk of C values (default 4096) a float32 scale absmax/127 and one
//                       int8 per value, rounded to nearest (about 1 byte per value)
//   topk:ratio=R        the ceil(R x P) largest values in magnitude, as (index, value) pairs, with
//                       error feedback: what is not sent stays in the sender's residual and is
//                       added to its next delta (8 bytes per sent value)
//   terngrad            per tensor a scale s = max |v| and per value a stochastic ternary
//                       s x sign(v) x Bernoulli(|v| / s), unbiased (2 bits per value)
//   qsgd[:levels=L]     per tensor the L2 norm and per value a stochastic level of |v| / norm on L
//                       levels (default 16) with its sign, unbiased (1 byte per value)
//   dct[:chunk=C,k=K,decay=B]
//                       per tensor, chunks of C values (64) in the DCT domain, their K largest
//                       coefficients (8) as (u8 index, f32 value), with error feedback whose
//                       residual decays by B (1) before each delta joins it: DeMo's fast
//                       components of a momentum (compression/dct_codec.cpp; 5 bytes per sent value)
//   exactsum            a sum of weighted deltas in int64 fixed point (aggregators/exact_sum.h): what
//                       an edge aggregator sends its parent (8 bytes per value); read as a
//                       PartialSumDelta (aggregators/partial_sum_delta.h)
// Layout: "PXC1", the codec's id byte, the number of values (u64), then the codec's payload; all
// little-endian (compression/codec_wire.h). A new codec is one file (compression/<name>_codec.cpp, with its
// factory) and one line in codec.cpp's list.
// int8, top-k, fp16 and bf16 also read their bytes into a CodedDelta (core/coded_delta.h) that the averaging
// family folds without a float32 copy, and that the server's store keeps as it came.
// Codecs are immutable; thread-safe. The residual belongs to one sender.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/coded_delta.h"
#include "core/model_state.h"
#include "core/status.h"

namespace plexus {

class ExactSum;
struct PartialContribution;
struct Update;
class ThreadPool;

class Codec {
 public:
  virtual ~Codec() = default;
  // `residual`: the sender's error feedback (same layout as `delta`, zeros at first), used and
  // updated by codecs that keep one (uses_residual), ignored by the others. `seed` drives the
  // stochastic codecs (terngrad, qsgd), so an encoding is reproducible.
  std::string Encode(const ModelState& delta, ModelState* residual, uint64_t seed) const {
    std::string out;
    EncodeTo(delta, residual, seed, &out);
    return out;
  }
  // As Encode, into `out` (replaced; its capacity is reused, which spares a senders that encodes
  // every task the page faults of a fresh model-sized buffer).
  virtual void EncodeTo(const ModelState& delta, ModelState* residual, uint64_t seed, std::string* out) const = 0;
  // The delta with `layout`'s tensors. InvalidArgument for bytes of another codec or length, an
  // index out of range or out of order, a scale that is not finite or negative.
  virtual Result<ModelState> Decode(std::string_view bytes, const ModelState& layout) const = 0;
  // The exact size of Encode's bytes for a delta of `layout` (every codec here has a fixed size
  // for a layout), so that a simulator can time a transfer before it encodes.
  virtual size_t EncodedSize(const ModelState& layout) const = 0;
  virtual std::string Describe() const = 0;
  virtual bool uses_residual() const { return false; }
  // Whether every value arrives, within a bounded error and the same every time (f32, fp16,
  // bf16, int8), so that a whole model may travel in it: top-k drops values, TernGrad and QSGD
  // randomize them.
  virtual bool keeps_every_value() const { return false; }

  // Whether Read can keep this codec's bytes as a CodedDelta (int8, top-k, fp16, bf16: stored as
  // they came, folded without a float32 copy; TernGrad, QSGD and f32 decode).
  virtual bool has_coded_form() const { return false; }
  // The bytes, checked as Decode checks them, kept as a CodedDelta of `layout`'s size; its
  // values are Decode's. InvalidArgument as Decode; FailedPrecondition without a coded form.
  virtual Result<std::shared_ptr<const CodedDelta>> Read(std::string bytes, const ModelState& layout) const;

  // The spec MakeCodec was given ("int8:chunk=1024").
  const std::string& spec() const { return spec_; }

 private:
  friend Result<std::unique_ptr<Codec>> MakeCodec(std::string_view spec, ThreadPool* pool);
  std::string spec_;
};

// InvalidArgument naming --codec for an unknown codec or a bad parameter. With `pool` (not
// owned; must outlive the codec), f32, fp16, bf16 and int8 split large deltas across its threads
// (calls from several threads then take turns on the pool); the bytes are the same either way.
Result<std::unique_ptr<Codec>> MakeCodec(std::string_view spec, ThreadPool* pool = nullptr);

// What the server gives its store to read persisted coded updates back: MakeCodec(codec)->Read
// for deltas of `layout`'s size.
CodedDeltaReader MakeCodedDeltaReader(ModelState layout);

// The codec in which an edge aggregator forwards its clients' updates raw (plexus server
// --upstream-forward raw), and their bytes: each update under its client id as path, a bundle's
// own updates flattened under it. REQUIRES: every update has `values` values.
inline constexpr char kUpdateBundleCodec[] = "bundle";
std::string EncodeUpdateBundle(std::span<const Update> updates, size_t values);

// The codec an edge aggregator's partial sums travel in (plexus server --upstream).
inline constexpr char kPartialSumCodec[] = "exactsum";
// The `exactsum` codec's bytes of an edge's partial sum, followed by the list of the client updates
// in it (aggregators/partial_sum_delta.h; may be empty).
std::string EncodePartialSum(const ExactSum& sum, std::span<const PartialContribution> contributions = {});
// The list alone (the trailer EncodePartialSum appends): a uint32 count, then each entry's three
// strings as uint32 length and bytes, little-endian. DecodeContributions refuses bytes that are not
// one whole list, and strings longer than 1024 bytes.
std::string EncodeContributions(std::span<const PartialContribution> contributions);
Result<std::vector<PartialContribution>> DecodeContributions(std::string_view bytes);

// The codecs MakeCodec knows, by name ("int8", not "int8:chunk=4096"): what a client advertises
// when it joins.
std::vector<std::string> CodecNames();
// The name of a codec spec: what comes before its parameters.
std::string CodecNameOf(std::string_view spec);

}  // namespace plexus
