// A CRDT replica's state in an SQLite file: its id, its set (adds and tombstones) and every
// contribution it holds, with the signatures. Saving only adds rows (the state only grows), in
// one transaction; loading verifies every contribution again, so a file edited by hand or
// damaged on disk is refused rather than merged. Thread-compatible.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "crdt/crdt_replica.h"

namespace plexus {

// FailedPrecondition when the file holds another replica's state.
Status SaveReplica(const CrdtReplica& replica, const std::string& path);

// NotFound when the file holds no replica; InvalidArgument/PermissionDenied (as
// AuthorKeys::Verify) for a contribution that does not check out. `keys` must outlive the result.
Result<std::unique_ptr<CrdtReplica>> LoadReplica(const std::string& path, const AuthorKeys* keys);

}  // namespace plexus
