// Store: the server's durable state: federation metadata, clients, rounds, and one checkpoint per
// model version. CommitRound writes a round's record and its checkpoint in one transaction, so
// after a crash either both are there or neither is. Implementations: MemoryStore (tests,
// simulator) and SqliteStore (server). Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/client_record.h"
#include "core/large_block_source.h"
#include "core/model_state.h"
#include "core/round_record.h"
#include "core/status.h"
#include "core/update.h"

namespace plexus {

// An acknowledged update of an asynchronous mode that no committed version holds yet.
struct LoggedUpdate {
  uint64_t seq = 0;  // the engine's sequence number, unique among logged updates
  Update update;     // with only its "train_loss" metric
};

// A round in progress: which client holds which task. Kept so that a restarted server continues
// the round instead of dropping the updates it has already acknowledged.
struct OpenRoundRecord {
  uint64_t round = 0;
  int64_t attempt = 0;
  std::vector<std::pair<std::string, std::string>> tasks;  // (client id, task id), sorted by client
};

class Store {
 public:
  virtual ~Store() = default;

  // Free-form settings that must survive restarts (model name, strategy).
  virtual Status PutMeta(const std::string& key, const std::string& value) = 0;
  // NotFound when absent.
  virtual Result<std::string> GetMeta(const std::string& key) = 0;

  // Inserts or replaces the client with this id.
  virtual Status PutClient(const ClientRecord& client) = 0;
  virtual Result<std::vector<ClientRecord>> ListClients() = 0;

  // Stores the model as the checkpoint of its version (the initial model, version 0).
  // AlreadyExists when that version is already stored with different content.
  virtual Status PutCheckpoint(const ModelState& model) = 0;

  // Stores the round record, the checkpoint of round.model_version and the strategy's state
  // after the round (server optimizer moments; empty for stateless strategies, replacing any
  // earlier state) atomically, and forgets the open round and its accepted updates in the same
  // transaction, with the logged updates round.logged_done names.
  // REQUIRES: model.version() == round.model_version.
  virtual Status CommitRound(const RoundRecord& round, const ModelState& model, std::string_view aggregator_state) = 0;
  // Optional, just before the CommitRound of this same model (unchanged in between): writes what
  // of its checkpoint can be durable before the round's record (SqliteStore: the checkpoint's
  // file), so that the caller can hash the model on another thread meanwhile; CommitRound then
  // writes only the rows. A version that already has a checkpoint is left to CommitRound. A
  // crash in between leaves a file no row names, replaced when the version is committed again.
  // REQUIRES: the next CommitRound of this version, if it is to skip the write, commits this same
  // object, alive and unchanged in between: the store knows it by its version and memory, so a
  // model freed and another of that size allocated in its place would not be told apart.
  virtual Status PrepareCheckpoint(const ModelState& model) {
    (void)model;
    return Status::Ok();
  }
  // The strategy state committed with the newest round; empty when none was.
  virtual Result<std::string> AggregatorState() = 0;

  // Records the round in progress, replacing any earlier one, and drops accepted updates that
  // belong to another (round, attempt).
  virtual Status PutOpenRound(const OpenRoundRecord& round) = 0;
  // The round in progress, or nullopt.
  virtual Result<std::optional<OpenRoundRecord>> GetOpenRound() = 0;
  // Stores an update of the open round durably, before the server acknowledges it.
  // Only its "train_loss" metric is kept.
  virtual Status PutAcceptedUpdate(uint64_t round, int64_t attempt, const Update& update) = 0;
  // The accepted updates of (round, attempt), sorted by client id.
  virtual Result<std::vector<Update>> ListAcceptedUpdates(uint64_t round, int64_t attempt) = 0;

  // Asynchronous modes: stores an acknowledged update durably, before the server acknowledges
  // it, under sequence number `seq` (AlreadyExists when `seq` is taken). It stays logged until a
  // committed round names it in RoundRecord::logged_done, so that a restarted engine folds again
  // every update it acknowledged but had not committed. Only its "train_loss" metric is kept.
  virtual Status LogUpdate(uint64_t seq, const Update& update) = 0;
  // The logged updates, by sequence number.
  virtual Result<std::vector<LoggedUpdate>> ListLoggedUpdates() = 0;
  // Attaches evaluation results to a committed round. NotFound for an unknown round.
  virtual Status SetRoundEvaluation(uint64_t round, double test_accuracy, double test_loss) = 0;
  // Attaches a federated evaluation (the federated_* fields of `evaluation`) to the committed
  // round that published `evaluation.model_version`, replacing an earlier one. NotFound when no
  // round did.
  virtual Status SetFederatedEvaluation(const RoundRecord& evaluation) = 0;

  virtual Result<std::vector<RoundRecord>> ListRounds() = 0;

  // The checkpoint with the highest version, or nullopt for an empty store.
  virtual Result<std::optional<ModelState>> LatestCheckpoint() = 0;
  // NotFound for an unknown version; DataLoss when the stored bytes no longer match their hash.
  virtual Result<ModelState> Checkpoint(uint64_t version) = 0;
  virtual Result<std::vector<uint64_t>> CheckpointVersions() = 0;

  // Where an upload's values are best decoded (ScopedLargeBlockSource around the decoding), so
  // that storing the update (PutAcceptedUpdate, LogUpdate) copies none of them: memory that is
  // already the file the store keeps the update in. Null (the default): any memory does.
  virtual std::shared_ptr<LargeBlockSource> UpdateMemory() { return nullptr; }
};

}  // namespace plexus
