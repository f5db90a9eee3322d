// Contribution: one model delta offered to a CRDT merge, with who made it and how much it weighs.
// It is content-addressed: Id() is the SHA-256 of a canonical encoding of every field but the
// signature, and the author signs that id with Ed25519. AuthorKeys holds the trusted public keys
// and refuses any contribution whose id or signature does not check out. Values; thread-compatible.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/model_state.h"
#include "core/status.h"
#include "crdt/signing.h"

namespace plexus {

struct Contribution {
  std::string author;
  int64_t examples = 1;       // weight in averaging strategies; positive
  uint64_t base_version = 0;  // the model version the delta was trained from
  uint64_t created_round = 0;
  ModelState delta;
  std::string signature;  // Ed25519 by `author` over Id()
  // The delta's wire form when it travels in a codec's bytes (a pseudo-gradient in int8, DeMo's
  // DCT components): `delta` is then `codec`'s Decode of `coded`, made by whoever decoded them
  // (the author, or a node that received them). Not part of Id: the identity is the decoded
  // values, so a relay passes the bytes on as they came, and a contribution without them (one
  // that lost its coded form) is the same contribution, travelling as float32.
  std::string codec;
  std::shared_ptr<const std::string> coded;

  // What the contribution's delta takes on the wire: the coded bytes, else its float32 values.
  size_t WireBytes() const { return coded ? coded->size() : delta.num_bytes(); }

  // Lower-case hex SHA-256 over "plexus.contribution.v1", the length-prefixed author, the three
  // integers (little-endian) and delta.ContentSha256().
  std::string Id() const;
};

// Sets c.signature to key's signature of c.Id().
Status Sign(Contribution& c, const SigningKey& key);

class AuthorKeys {
 public:
  AuthorKeys() = default;
  AuthorKeys(const AuthorKeys& other);
  AuthorKeys& operator=(const AuthorKeys& other);

  // Sets (or replaces) `author`'s key.
  void Add(const std::string& author, std::string public_key);
  bool Knows(const std::string& author) const;
  // OK when `c` hashes to `id`, has a positive example count, finite values, and is signed by
  // its author's key. InvalidArgument for a content/id mismatch or bad fields, PermissionDenied
  // for an unknown author or a signature that does not verify.
  Status Verify(const std::string& id, const Contribution& c) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::string> keys_;  // guarded by mu_
};

}  // namespace plexus
