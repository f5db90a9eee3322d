// HeapBlockLender: a LargeBlockSource for tests that lends heap blocks (of one size, or of any)
// and records which are out and how many came back. Thread-safe.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <new>

#include "core/large_block_source.h"

namespace plexus::testing {

class HeapBlockLender final : public LargeBlockSource {
 public:
  // Lends blocks of exactly `only_bytes` (0: of any size) and declines the rest.
  explicit HeapBlockLender(size_t only_bytes = 0) : only_bytes_(only_bytes) {}
  void* Take(size_t bytes) override {
    if (only_bytes_ != 0 && bytes != only_bytes_) return nullptr;
    void* p = ::operator new(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    out_[p] = bytes;
    return p;
  }
  void GiveBack(void* p, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = out_.find(p);
      ASSERT_NE(it, out_.end()) << "given back a block it did not lend";
      EXPECT_EQ(it->second, bytes);
      out_.erase(it);
      ++given_back_;
    }
    ::operator delete(p);
  }
  // Whether `p` is the start of a block lent and not given back.
  bool lent(const void* p) {
    std::lock_guard<std::mutex> lock(mu_);
    return out_.count(const_cast<void*>(p)) > 0;
  }
  int given_back() {
    std::lock_guard<std::mutex> lock(mu_);
    return given_back_;
  }

 private:
  const size_t only_bytes_;
  std::mutex mu_;
  std::map<void*, size_t> out_;  // guarded by mu_
  int given_back_ = 0;           // guarded by mu_
};

}  // namespace plexus::testing
