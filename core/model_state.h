// ModelState: a model's parameters as ordered, named float32 tensors stored in one flat buffer,
// plus a monotonically increasing version. Aggregation works on the flat buffer; the layout table
// says which range belongs to which tensor. A ModelState owns its data (value semantics).
// Thread-compatible.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/large_blocks.h"
#include "core/status.h"

namespace plexus {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
};

// Where one tensor lives in the flat buffer.
struct TensorSlot {
  std::string name;
  std::vector<int64_t> shape;
  size_t offset = 0;  // in floats
  size_t numel = 0;
};

// The allocator of model buffers: leaves new floats uninitialized where std::allocator would zero
// them, so that a buffer every value of which is about to be written costs no extra pass over
// memory, and takes model-sized buffers from the large-block cache (core/large_blocks.h).
template <typename T>
struct ModelBufferAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = ModelBufferAllocator<U>;
  };
  using std::allocator<T>::allocator;
  T* allocate(size_t n) {
    if (n * sizeof(T) >= kLargeBlockBytes) return static_cast<T*>(AllocateLargeBlock(n * sizeof(T)));
    return std::allocator<T>::allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n * sizeof(T) >= kLargeBlockBytes) return FreeLargeBlock(p, n * sizeof(T));
    std::allocator<T>::deallocate(p, n);
  }
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

class ModelState {
 public:
  ModelState() = default;
  // Copies take the values with one memcpy: the vector's own copy goes through the allocator's
  // construct value by value, which GCC at -O2 leaves a scalar loop (a sixth of the
  // ingest benchmark's time went to copying a 4 MB update that way).
  ModelState(const ModelState& other);
  ModelState& operator=(const ModelState& other);
  ModelState(ModelState&&) noexcept = default;
  ModelState& operator=(ModelState&&) noexcept = default;

  // A zero-filled model with the given tensors, in order. Fails on empty or duplicate names and
  // negative dimensions.
  static Result<ModelState> Create(const std::vector<TensorSpec>& tensors, uint64_t version = 0);
  // As Create, values unspecified: for callers that write every value (decoders).
  static Result<ModelState> CreateUninitialized(const std::vector<TensorSpec>& tensors, uint64_t version = 0);

  // A zero-filled model with the same layout as `other`, version 0.
  static ModelState ZerosLike(const ModelState& other);
  // The same layout as `other`, version 0, values unspecified: for callers that write every value.
  static ModelState UninitializedLike(const ModelState& other);

  const std::vector<TensorSlot>& tensors() const { return slots_; }
  size_t num_params() const { return data_.size(); }
  size_t num_bytes() const { return data_.size() * sizeof(float); }

  // Mutable access forgets that the values were checked finite (see CheckFinite).
  std::span<float> data() {
    finite_checked_ = false;
    return data_;
  }
  std::span<const float> data() const { return data_; }
  std::span<float> tensor(size_t i) {
    finite_checked_ = false;
    return std::span<float>(data_).subspan(slots_[i].offset, slots_[i].numel);
  }
  std::span<const float> tensor(size_t i) const {
    return std::span<const float>(data_).subspan(slots_[i].offset, slots_[i].numel);
  }

  uint64_t version() const { return version_; }
  void set_version(uint64_t v) { version_ = v; }

  // OK when names and shapes agree tensor by tensor; otherwise InvalidArgument naming the first
  // mismatch.
  Status CheckSameLayout(const ModelState& expected) const;

  // this -= other, value by value (e.g. trained weights minus base weights gives a delta).
  // REQUIRES: the same layout (CheckSameLayout).
  void Subtract(const ModelState& other);
  // this += other, value by value (a base plus a delta gives the trained weights).
  // REQUIRES: the same layout (CheckSameLayout).
  void Add(const ModelState& other);
  // this *= s, value by value. Values known finite stay so when |s| <= 1.
  void Scale(float s);

  // OK when every value is finite; otherwise InvalidArgument naming the tensor and index.
  // Free when a decoder checked every value as it arrived (SafetensorsStreamDecoder) and none
  // was written since: on the server each update is then checked once, while its bytes are
  // still in cache, instead of in one more pass over memory.
  Status CheckFinite() const;
  // For a decoder that checked every value as it wrote it (after its last write through
  // data()): CheckFinite is then free.
  void MarkCheckedFinite() { finite_checked_ = true; }
  // Whether CheckFinite is free: every value was checked finite and none written since.
  bool checked_finite() const { return finite_checked_; }

  // SHA-256 (lower-case hex) over a canonical encoding of names, shapes and values. The version
  // is not part of the content, so equal parameters hash equal whatever their version.
  std::string ContentSha256() const;
  // CRC-32C (core/crc32c.h) over the same encoding: a check that a copy of a model whose hash is
  // known arrived whole and is that model (a client's download), many times cheaper than the
  // hash. Not an identity: it catches corruption and wrong bytes, not a forger.
  uint32_t ContentCrc32c() const;
  struct ContentDigests {
    std::string sha256;   // ContentSha256()
    uint32_t crc32c = 0;  // ContentCrc32c()
  };
  // Both in one pass: each piece of the values is read from memory once for the two.
  ContentDigests Digests() const;

  friend bool operator==(const ModelState& a, const ModelState& b);

 private:
  std::vector<TensorSlot> slots_;
  std::vector<float, ModelBufferAllocator<float>> data_;
  uint64_t version_ = 0;
  bool finite_checked_ = false;  // every value checked finite and none written since

  friend class SafetensorsStreamDecoder;  // checks values as it decodes them
};

// True when no value is NaN or infinite (one vectorizable pass).
bool AllFinite(std::span<const float> values);

// Bytes as lower-case hex, two digits each.
std::string LowerHex(std::span<const unsigned char> bytes);

// Lower-case hex SHA-256 of arbitrary bytes, or of pieces of bytes one after the other.
std::string Sha256Hex(std::span<const unsigned char> bytes);
std::string Sha256Hex(const std::string& bytes);
std::string Sha256Hex(std::initializer_list<std::string_view> pieces);

}  // namespace plexus
