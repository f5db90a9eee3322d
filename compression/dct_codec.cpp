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
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>
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

class DctCodec final : public Codec {
 public:
  DctCodec(size_t chunk, size_t k, double decay) : dct_(chunk), k_(k), decay_(decay) {}

  void EncodeTo(const ModelState& d, ModelState* residual, uint64_t, std::string* result) const override {
    const size_t n = d.num_params();
    std::vector<float> v(d.data().begin(), d.data().end());
    const bool feedback = residual && residual->num_params() == n;
    if (feedback) {
      std::span<const float> r = std::as_const(*residual).data();
      const auto decay = static_cast<float>(decay_);
      for (size_t i = 0; i < n; ++i) v[i] += decay * r[i];
    }
    std::string& out = Header(result, kId, n);
    out.reserve(EncodedSize(d));
    Put<uint32_t>(out, static_cast<uint32_t>(dct_.chunk()));
    Put<uint32_t>(out, static_cast<uint32_t>(k_));
    // What was sent, in the DCT domain (the rest zero), to take out of the residual.
    std::vector<double> coefficients(n), sent(feedback ? n : 0, 0.0);
    std::vector<uint32_t> order;
    for (const TensorSlot& t : d.tensors()) {
      dct_.Forward(std::span<const float>(v).subspan(t.offset, t.numel),
                   std::span<double>(coefficients).subspan(t.offset, t.numel));
      for (size_t begin = t.offset, end = t.offset + t.numel; begin < end; begin += dct_.chunk()) {
        const size_t len = std::min(dct_.chunk(), end - begin);
        const size_t keep = std::min(k_, len);
        order.resize(len);
        std::iota(order.begin(), order.end(), 0u);
        // The largest magnitudes (ties: the lower index), then in index order.
        const double* c = coefficients.data() + begin;
        std::nth_element(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep - 1), order.end(),
                         [c](uint32_t a, uint32_t b) {
                           return std::abs(c[a]) != std::abs(c[b]) ? std::abs(c[a]) > std::abs(c[b]) : a < b;
                         });
        std::sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(keep));
        for (size_t j = 0; j < keep; ++j) {
          const auto value = static_cast<float>(c[order[j]]);
          Put<uint8_t>(out, static_cast<uint8_t>(order[j]));
          Put<float>(out, value);
          if (feedback) sent[begin + order[j]] = value;
        }
      }
    }
    if (feedback) {  // the residual keeps what the sent coefficients do not carry
      std::vector<float> q(n);
      for (const TensorSlot& t : d.tensors()) {
        dct_.Inverse(std::span<const double>(sent).subspan(t.offset, t.numel),
                     std::span<float>(q).subspan(t.offset, t.numel));
      }
      std::span<float> r = residual->data();
      for (size_t i = 0; i < n; ++i) r[i] = v[i] - q[i];
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
    std::vector<double> coefficients(n, 0.0);
    size_t at = kHeaderBytes + 8;
    for (const TensorSlot& t : layout.tensors()) {
      for (size_t begin = t.offset, end = t.offset + t.numel; begin < end; begin += dct_.chunk()) {
        const size_t len = std::min(dct_.chunk(), end - begin);
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
          coefficients[begin + index] = value;
        }
      }
    }
    ModelState out = ModelState::ZerosLike(layout);
    for (const TensorSlot& t : layout.tensors()) {
      dct_.Inverse(std::span<const double>(coefficients).subspan(t.offset, t.numel),
                   out.data().subspan(t.offset, t.numel));
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
