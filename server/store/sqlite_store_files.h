// What both halves of SqliteStore (sqlite_store.cpp: checkpoints, rounds, retention;
// sqlite_store_updates.cpp: accepted updates and the update log) agree on about the rows and
// files next to its database. Internal to server/store.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "core/atomic_file.h"
#include "core/model_state.h"
#include "core/safetensors.h"

namespace plexus::sqlite_store {

// 16 lower-case hex digits: the random part of a file's name.
inline std::string HexTag(uint64_t tag) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(tag));
  return hex;
}

// A new file of the updates folder (`tag` random). The name says nothing about the update: the
// file is reused for later ones (float32 safetensors or a codec's bytes, as its row says).
inline std::string NewUpdateFileName(uint64_t tag) { return "update-" + HexTag(tag); }

// The safetensors header of a model or update file: for a model large enough to be written past
// the page cache, padded so that its values start on a block boundary and go to the disk from the
// model's own memory, not through a copy.
inline std::string StoredFilePrefix(const ModelState& model) {
  return model.num_bytes() >= kDirectWriteMinBytes ? SafetensorsPrefixAlignedTo(model, kDirectWriteAlignment)
                                                   : SafetensorsPrefix(model);
}

// A strategy's state (Aggregator::SaveState) of at least this size is kept in a file next to the
// checkpoints, under one of two names used in turn (SqliteStore::WriteStateFileLocked); smaller
// ones stay in their row.
inline constexpr size_t kStateFileMinBytes = size_t{64} << 10;
inline constexpr const char* kStateFileNames[2] = {"strategy-state-a", "strategy-state-b"};

// A state file: this header (magic, the state's size and its CRC-32C, little-endian), then the
// state's bytes. The CRC catches a damaged file at restore, where the row alone cannot.
inline constexpr char kStateFileMagic[8] = {'P', 'X', 'S', 'T', 'A', 'T', 'E', '1'};
inline constexpr size_t kStateFileHeaderBytes = 8 + 8 + 4;

// Asynchronous modes log their acknowledged updates (Store::LogUpdate) in the accepted-updates
// table as round 0, which no sync round has, with the sequence number as the attempt.
inline constexpr int64_t kLogRound = 0;

// A file name as the store writes them: nothing that reaches outside its folder, whatever a
// damaged or edited database says.
inline bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace plexus::sqlite_store
