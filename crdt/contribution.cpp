#include "crdt/contribution.h"

namespace plexus {
namespace {

void AppendU64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

}  // namespace

std::string Contribution::Id() const {
  std::string enc = "plexus.contribution.v1";
  AppendU64(enc, author.size());
  enc += author;
  AppendU64(enc, static_cast<uint64_t>(examples));
  AppendU64(enc, base_version);
  AppendU64(enc, created_round);
  enc += delta.ContentSha256();
  return Sha256Hex(enc);
}

Status Sign(Contribution& c, const SigningKey& key) {
  PLEXUS_ASSIGN_OR_RETURN(c.signature, key.Sign(c.Id()));
  return Status::Ok();
}

AuthorKeys::AuthorKeys(const AuthorKeys& other) {
  std::lock_guard<std::mutex> lock(other.mu_);
  keys_ = other.keys_;
}

AuthorKeys& AuthorKeys::operator=(const AuthorKeys& other) {
  if (this == &other) return *this;
  std::map<std::string, std::string> copy;
  {
    std::lock_guard<std::mutex> lock(other.mu_);
    copy = other.keys_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  keys_ = std::move(copy);
  return *this;
}

void AuthorKeys::Add(const std::string& author, std::string public_key) {
  std::lock_guard<std::mutex> lock(mu_);
  keys_[author] = std::move(public_key);
}

bool AuthorKeys::Knows(const std::string& author) const {
  std::lock_guard<std::mutex> lock(mu_);
  return keys_.count(author) > 0;
}

Status AuthorKeys::Verify(const std::string& id, const Contribution& c) const {
  const std::string actual = c.Id();
  if (actual != id) {
    return InvalidArgumentError("contribution " + id.substr(0, 12) + "... does not match its content (hashes to " +
                                actual.substr(0, 12) + "...)");
  }
  if (c.examples <= 0) return InvalidArgumentError("contribution " + id.substr(0, 12) + "... has no examples");
  PLEXUS_RETURN_IF_ERROR(c.delta.CheckFinite().WithContext("contribution " + id.substr(0, 12) + "..."));
  std::string key;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = keys_.find(c.author);
    if (it != keys_.end()) key = it->second;
  }
  if (key.empty()) {
    return PermissionDeniedError("contribution " + id.substr(0, 12) + "... from unknown author '" + c.author + "'");
  }
  return VerifySignature(key, id, c.signature)
      .WithContext("contribution " + id.substr(0, 12) + "... by '" + c.author + "'");
}

}  // namespace plexus
