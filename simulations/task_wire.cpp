#include "simulations/task_wire.h"

#include <cstring>
#include <type_traits>

#include "core/safetensors.h"

namespace plexus {
namespace {

// Fixed-width fields appended to a byte string, read back in the same order. Both ends are
// the same binary on the same kind of machine, so host byte order is fine.
class Writer {
 public:
  template <typename T>
  Writer& Put(const T& v) {
    static_assert(std::is_trivially_copyable_v<T>);
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  Writer& PutBytes(std::string_view b) {
    Put<uint64_t>(b.size());
    bytes_.append(b);
    return *this;
  }
  std::string Take() { return std::move(bytes_); }

 private:
  std::string bytes_;
};

class Reader {
 public:
  explicit Reader(std::string_view bytes) : rest_(bytes) {}
  template <typename T>
  bool Get(T* v) {
    if (rest_.size() < sizeof(T)) return false;
    std::memcpy(v, rest_.data(), sizeof(T));
    rest_.remove_prefix(sizeof(T));
    return true;
  }
  bool GetBytes(std::string_view* b) {
    uint64_t n = 0;
    if (!Get(&n) || rest_.size() < n) return false;
    *b = rest_.substr(0, n);
    rest_.remove_prefix(n);
    return true;
  }
  bool done() const { return rest_.empty(); }

 private:
  std::string_view rest_;
};

}  // namespace

std::string EncodeJob(uint64_t key, const TrainJob& job) {
  const TrainOptions& o = job.options;
  Writer w;
  w.Put(key).Put(o.local_epochs).Put(o.local_steps).Put(o.batch_size).Put(o.learning_rate).Put(o.momentum);
  w.Put(o.prox_mu).Put(o.seed).Put<uint8_t>(job.flip_labels).Put<uint8_t>(o.optimizer == "adamw").Put(o.weight_decay);
  w.PutBytes({reinterpret_cast<const char*>(job.indices.data()), job.indices.size() * sizeof(uint32_t)});
  return w.Take();
}

bool DecodeJob(std::string_view bytes, uint64_t* key, TrainJob* job) {
  Reader r(bytes);
  TrainOptions& o = job->options;
  uint8_t flip = 0, adamw = 0;
  std::string_view indices;
  if (!(r.Get(key) && r.Get(&o.local_epochs) && r.Get(&o.local_steps) && r.Get(&o.batch_size) &&
        r.Get(&o.learning_rate) && r.Get(&o.momentum) && r.Get(&o.prox_mu) && r.Get(&o.seed) && r.Get(&flip) &&
        r.Get(&adamw) && r.Get(&o.weight_decay) && r.GetBytes(&indices) && r.done() &&
        indices.size() % sizeof(uint32_t) == 0)) {
    return false;
  }
  o.optimizer = adamw ? "adamw" : "sgd";
  job->flip_labels = flip != 0;
  job->indices.resize(indices.size() / sizeof(uint32_t));
  std::memcpy(job->indices.data(), indices.data(), indices.size());
  return true;
}

std::string EncodeFetch(uint64_t key) { return Writer().Put(key).Take(); }

bool DecodeFetch(std::string_view bytes, uint64_t* key) {
  Reader r(bytes);
  return r.Get(key) && r.done();
}

// An outcome: ok, examples, steps, loss and the weights; or not ok and the error's code and text.
std::string EncodeOutcome(const Result<TrainOutcome>& r) {
  Writer w;
  if (!r.ok()) {
    w.Put<uint8_t>(0).Put(static_cast<int32_t>(r.status().code())).PutBytes(r.status().message());
    return w.Take();
  }
  w.Put<uint8_t>(1).Put(r->num_examples).Put(r->steps).Put(r->mean_loss).PutBytes(EncodeSafetensors(r->weights));
  return w.Take();
}

Result<TrainOutcome> DecodeOutcome(std::string_view bytes, int rank) {
  const std::string from = "training rank " + std::to_string(rank);
  Reader r(bytes);
  uint8_t ok = 0;
  if (!r.Get(&ok)) return InternalError(from + " sent an empty outcome");
  if (!ok) {
    int32_t code = 0;
    std::string_view message;
    if (!r.Get(&code) || !r.GetBytes(&message)) return InternalError(from + " sent a malformed error");
    return Status(static_cast<StatusCode>(code), std::string(message)).WithContext(from);
  }
  TrainOutcome out;
  std::string_view weights;
  if (!(r.Get(&out.num_examples) && r.Get(&out.steps) && r.Get(&out.mean_loss) && r.GetBytes(&weights) && r.done())) {
    return InternalError(from + " sent a malformed outcome");
  }
  PLEXUS_ASSIGN_OR_RETURN(out.weights, DecodeSafetensors(weights));
  return out;
}

}  // namespace plexus
