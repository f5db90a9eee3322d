// dct[:chunk=C,k=K,decay=B]: per tensor, chunks of C values (default 64, at most 256) in the DCT
// domain (compression/chunked_dct.h), of which the K largest coefficients in magnitude (default 8;
// all of a shorter last chunk when it has fewer) are sent as (index in the chunk: u8, value: f32),
// chunk after chunk, indices ascending: 5 bytes per sent coefficient, C x 4 / (K x 5) less than
// float32 (6.4x by default). With error feedback: what is not sent stays in the sender's residual,
// which is multiplied by B (default 1) before the next delta is added to it.
//
// With a decay B < 1, clients that take one plain SGD step per task (`--local-steps 1
// --momentum 0`) and a server that averages (FedAvg) run DeMo (Peng, Quesnelle and Kingma 2024),
// its signless variant: the residual is the momentum m <- B m + g (scaled by the client's -lr),
// the sent coefficients are its fast components q, m <- m - q, and the server applies the mean q.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "aggregators/strategy_spec.h"
#include "compression/chunked_dct.h"
#include "compression/codec.h"
#include "compression/codec_wire.h"

namespace plexus {
namespace {

using namespace codec_wire;  // NOLINT: this file is one codec in that format

constexpr uint8_t kId = 9;
constexpr size_t kEntryBytes = 1 + 4;  // u8 index in the chunk, f32 coefficient

// A chunk's chosen coefficients: indices, and their magnitudes while choosing.
struct Chosen {
  std::array<uint8_t, 256> index;
  std::array<double, 256> magnitude;
};

// The indices of the `keep` largest magnitudes among c[0, len), ties to the lower index, in index
// order. One scan in index order keeps the best so far, largest first: a later coefficient enters
// only when strictly larger than the last one kept (on a tie the earlier index stays ahead), so
// most are turned away by one comparison, where sorting indices by magnitude compared each many
// times (nearly half of the encoder's time). REQUIRES: 1 <= keep <= len <= 256.
std::span<const uint8_t> LargestInChunk(const double* c, size_t len, size_t keep, Chosen* chosen) {
  size_t count = 0;
  for (size_t i = 0; i < len; ++i) {
    const double m = std::abs(c[i]);
    if (count == keep) {
      if (!(m > chosen->magnitude[count - 1])) continue;
      --count;  // the smallest kept gives way
    }
    size_t at = count++;
    for (; at > 0 && chosen->magnitude[at - 1] < m; --at) {
      chosen->magnitude[at] = chosen->magnitude[at - 1];
      chosen->index[at] = chosen->index[at - 1];
    }
    chosen->magnitude[at] = m;
    chosen->index[at] = static_cast<uint8_t>(i);
  }
  std::sort(chosen->index.begin(), chosen->index.begin() + static_cast<std::ptrdiff_t>(count));
  return std::span<const uint8_t>(chosen->index.data(), count);
}

class DctCodec final : public Codec {
 public:
  DctCodec(size_t chunk, size_t k, double decay) : dct_(chunk), k_(k), decay_(decay) {}

  // Chunk by chunk, with buffers of one chunk: the transform, the selection and (with error
  // feedback) the inverse of what was sent act within a chunk, and model-sized temporaries cost
  // their zeroing and page faults on every call (most of the encoder's time when it used them).
  void EncodeTo(const ModelState& d, ModelState* residual, uint64_t, std::string* result) const override {
    const size_t n = d.num_params();
    const bool feedback = residual && residual->num_params() == n;
    // What may be sent: the delta, plus with error feedback the decayed residual, summed in the
    // residual's own memory (which then keeps what the sent coefficients do not carry).
    std::span<const float> v = d.data();
    std::span<float> r;
    if (feedback) {
      r = residual->data();
      std::span<const float> delta = d.data();
      const auto decay = static_cast<float>(decay_);
      for (size_t i = 0; i < n; ++i) r[i] = delta[i] + decay * r[i];
      v = r;
    }
    std::string& out = Header(result, kId, n);
    out.reserve(EncodedSize(d));
    Put<uint32_t>(out, static_cast<uint32_t>(dct_.chunk()));
    Put<uint32_t>(out, static_cast<uint32_t>(k_));
    std::vector<double> coefficients(dct_.chunk()), sent(dct_.chunk());
    std::vector<float> carried(dct_.chunk());  // what the sent coefficients carry back in values
    Chosen order;
    for (const TensorSlot& t : d.tensors()) {
      for (size_t begin = t.offset, end = t.offset + t.numel; begin < end; begin += dct_.chunk()) {
        const size_t len = std::min(dct_.chunk(), end - begin);
        const size_t keep = std::min(k_, len);
        const double* c = coefficients.data();
        dct_.Forward(v.subspan(begin, len), std::span<double>(coefficients).first(len));
        const std::span<const uint8_t> chosen = LargestInChunk(c, len, keep, &order);
        if (feedback) std::fill(sent.begin(), sent.begin() + static_cast<std::ptrdiff_t>(len), 0.0);
        for (const uint8_t index : chosen) {
          const auto value = static_cast<float>(c[index]);
          Put<uint8_t>(out, index);
          Put<float>(out, value);
          if (feedback) sent[index] = value;
        }
        if (feedback) {  // the residual keeps what the sent coefficients do not carry
          dct_.Inverse(std::span<const double>(sent).first(len), std::span<float>(carried).first(len));
          for (size_t i = 0; i < len; ++i) r[begin + i] -= carried[i];
        }
      }
    }
  }

  Result<ModelState> Decode(std::string_view b, const ModelState& layout) const override {
    const size_t n = layout.num_params();
    PLEXUS_RETURN_IF_ERROR(CheckHeader(b, kId, n));
    PLEXUS_RETURN_IF_ERROR(CheckLength(b, EncodedSize(layout) - kHeaderBytes));
    const uint32_t chunk = Get<uint32_t>(b, kHeaderBytes), k = Get<uint32_t>(b, kHeaderBytes + 4);
    if (chunk != dct_.chunk() || k != k_) {
      return CodecError("dct bytes of chunk " + std::to_string(chunk) + " and k " + std::to_string(k) + ", not " +
                        std::to_string(dct_.chunk()) + " and " + std::to_string(k_));
    }
    ModelState out = ModelState::UninitializedLike(layout);  // the inverse writes every value
    std::vector<double> coefficients(dct_.chunk());
    size_t at = kHeaderBytes + 8;
    for (const TensorSlot& t : layout.tensors()) {
      for (size_t begin = t.offset, end = t.offset + t.numel; begin < end; begin += dct_.chunk()) {
        const size_t len = std::min(dct_.chunk(), end - begin);
        std::fill(coefficients.begin(), coefficients.begin() + static_cast<std::ptrdiff_t>(len), 0.0);
        int previous = -1;
        for (size_t j = 0, keep = std::min(k_, len); j < keep; ++j, at += kEntryBytes) {
          const uint8_t index = Get<uint8_t>(b, at);
          const float value = Get<float>(b, at + 1);
          if (index >= len || static_cast<int>(index) <= previous) {
            return CodecError("dct index " + std::to_string(index) + " out of range or out of order in a chunk of " +
                              std::to_string(len));
          }
          if (!std::isfinite(value)) return CodecError("dct coefficient that is not finite");
          previous = index;
          coefficients[index] = value;
        }
        dct_.Inverse(std::span<const double>(coefficients).first(len), out.data().subspan(begin, len));
      }
    }
    return Finished(std::move(out));  // huge coefficients could still sum past float's range
  }

  size_t EncodedSize(const ModelState& layout) const override {
    size_t entries = 0;
    for (const TensorSlot& t : layout.tensors()) {
      entries += t.numel / dct_.chunk() * std::min(k_, dct_.chunk()) + std::min(k_, t.numel % dct_.chunk());
    }
    return kHeaderBytes + 8 + entries * kEntryBytes;
  }
  std::string Describe() const override {
    char decay[32];
    std::snprintf(decay, sizeof decay, "%g", decay_);
    return "dct(chunk=" + std::to_string(dct_.chunk()) + ",k=" + std::to_string(k_) + ",decay=" + decay + ")";
  }
  bool uses_residual() const override { return true; }

 private:
  const ChunkedDct dct_;
  const size_t k_;
  const double decay_;
};

}  // namespace

Result<std::unique_ptr<Codec>> MakeDctCodec(StrategySpec& spec, ThreadPool*) {
  PLEXUS_ASSIGN_OR_RETURN(const int64_t chunk, spec.GetCount("chunk", 64));
  PLEXUS_ASSIGN_OR_RETURN(const int64_t k, spec.GetCount("k", 8));
  PLEXUS_ASSIGN_OR_RETURN(const double decay, spec.GetDouble("decay", 1.0));
  if (chunk < 1 || chunk > 256) return InvalidArgumentError("dct:chunk must be in [1, 256] (an index is one byte)");
  if (k < 1 || k > chunk) return InvalidArgumentError("dct:k must be in [1, chunk]");
  if (!(decay >= 0 && decay <= 1)) return InvalidArgumentError("dct:decay must be in [0, 1]");
  return std::unique_ptr<Codec>(std::make_unique<DctCodec>(static_cast<size_t>(chunk), static_cast<size_t>(k), decay));
}

}  // namespace plexus
