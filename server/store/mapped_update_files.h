// MappedUpdateFiles: files of a store's updates folder kept mapped into memory for their whole
// life, lent as the memory uploads are decoded into (a LargeBlockSource), so that logging an
// update writes only its header: its values are already the file's. Where the folder is in
// memory (tmpfs) the log's cost was the second copy of every update, into the file's pages
// (docs/benchmarks.md, "Logging into tmpfs"); a mapping made once and kept costs what a copy into
// the heap costs, while one made per update costs more than the copy it saves, so files stay
// mapped while they wait in the pool.
//
// Each file is a safetensors file whose header is padded to kValuesOffset bytes, the values after
// it; the block lent is the values. A file is lent (its block in use), logged (a row names it), both,
// or spare: it returns to the pool only when its block is given back and no row names it. The
// pool keeps a bounded number of spares and removes the rest. Files are named "update-<16 hex>"
// like the store's other update files; a new file's name is made durable (folder synced) before
// it is lent, so a row may name it at once. A crash leaves the files that no row names for the
// store's orphan sweep.
//
// Blocks hold the pool (shared_ptr) through the large-block registry, so the pool outlives its
// store while an update decoded into it is still in memory. Thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <unordered_map>

#include "core/atomic_file.h"
#include "core/large_block_source.h"
#include "core/status.h"

namespace plexus {

class MappedUpdateFiles final : public LargeBlockSource {
 public:
  // Where the values start in each file: where a large update's stored header ends
  // (StoredFilePrefix pads it to the direct writer's alignment), a whole page, so that the block
  // is page-aligned.
  static constexpr size_t kValuesOffset = kDirectWriteAlignment;

  // `dir` must exist. At most `max_spare_files` spares of `max_spare_bytes` in all are kept.
  MappedUpdateFiles(std::string dir, size_t max_spare_files, uint64_t max_spare_bytes);
  // Unmaps every file and removes those no row names (the spares).
  ~MappedUpdateFiles() override;

  // A spare of exactly `bytes` values, else a new file; nullptr when a new file cannot be made
  // (the heap serves the upload then, and it is logged by a copy).
  void* Take(size_t bytes) override;
  void GiveBack(void* p, size_t bytes) override;

  // When `values` (`bytes` long) is a block of this pool not yet logged and `header` is
  // kValuesOffset bytes long: writes `header` before the values, syncs the file, marks it logged
  // and returns its name, which the caller's row is to name. nullopt when `values` is no such
  // block (the caller writes a file of its own). Unavailable when the write or sync fails (the
  // file is then as if not logged).
  Result<std::optional<std::string>> Log(const void* values, size_t bytes, std::string_view header);
  // When `name` is one of these files: no row names it any more (dropped, or never committed),
  // and true; it joins the spares once its block is given back as well. False for other names.
  bool Forget(const std::string& name);

  // Files in each state now (a file lent and logged counts in both). For tests.
  struct Counts {
    size_t lent = 0;
    size_t logged = 0;
    size_t spare = 0;
  };
  Counts counts();

 private:
  struct File {
    std::string name;
    int fd = -1;
    char* base = nullptr;  // the whole file mapped: header, then values
    size_t values_bytes = 0;
    bool lent = false;
    bool logged = false;
    uint64_t spare_since = 0;  // when it last joined the spares (settled_ then)
  };
  // A file neither lent nor logged joins the spares, or is removed when they are full. Requires mu_.
  void SettleLocked(File* file);
  // Unmaps, closes and (when `remove`) deletes the file, and forgets it. Requires mu_.
  void DropLocked(File* file, bool remove);
  std::unique_ptr<File> MakeFile(size_t bytes);

  const std::string dir_;
  const size_t max_spare_files_;
  const uint64_t max_spare_bytes_;
  std::mutex mu_;
  std::unordered_map<const void*, std::unique_ptr<File>> files_;  // guarded by mu_; by values' address
  size_t spare_files_ = 0;                                        // guarded by mu_
  uint64_t settled_ = 0;                                          // files that joined the spares so far; guarded by mu_
  uint64_t spare_bytes_ = 0;                                      // guarded by mu_
  std::mt19937_64 name_rng_;                                      // guarded by mu_
};

}  // namespace plexus
