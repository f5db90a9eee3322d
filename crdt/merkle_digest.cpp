#include "crdt/merkle_digest.h"

#include <algorithm>
#include <string_view>

#include "core/model_state.h"
#include "crdt/merkle_walk.h"

namespace plexus {
namespace {

constexpr char kHex[] = "0123456789abcdef";

}  // namespace

MerkleDigest::MerkleDigest(const std::vector<std::string>& entries) {
  for (const std::string& e : entries) keys_.emplace_back(Sha256Hex(e), e);
  std::sort(keys_.begin(), keys_.end());
  keys_.erase(std::unique(keys_.begin(), keys_.end()), keys_.end());
  root_ = Build("", 0, keys_.size());
}

std::string MerkleDigest::Build(const std::string& prefix, size_t begin, size_t end) {
  if (begin == end) return "";
  std::string material;
  const bool leaf = end - begin <= kLeafSize || prefix.size() == 64;
  if (leaf) {
    for (size_t i = begin; i < end; ++i) material += keys_[i].first;
  } else {
    size_t at = begin;
    for (char digit : std::string_view(kHex, 16)) {
      const std::string child = prefix + digit;
      size_t stop = at;
      while (stop < end && keys_[stop].first.compare(0, child.size(), child) == 0) ++stop;
      material += Build(child, at, stop) + "|";
      at = stop;
    }
  }
  std::string hash = Sha256Hex(material);
  nodes_[prefix] = {hash, leaf};
  return hash;
}

std::pair<std::string, bool> MerkleDigest::Node(const std::string& prefix) const {
  auto it = nodes_.find(prefix);
  return it == nodes_.end() ? std::pair<std::string, bool>{"", true} : it->second;
}

std::vector<std::string> MerkleDigest::EntriesUnder(const std::string& prefix) const {
  std::vector<std::string> out;
  auto it = std::lower_bound(keys_.begin(), keys_.end(), std::pair<std::string, std::string>{prefix, ""});
  for (; it != keys_.end() && it->first.compare(0, prefix.size(), prefix) == 0; ++it) out.push_back(it->second);
  return out;
}

Result<std::vector<std::string>> MissingFrom(const MerkleDigest& mine, const DigestSource& theirs,
                                             size_t* node_hashes) {
  MerkleWalk walk(mine);
  while (!walk.done()) {
    for (const MerkleWalk::Question& q : walk.TakeQuestions()) {
      if (q.kind == MerkleWalk::Question::kNode) {
        PLEXUS_ASSIGN_OR_RETURN(auto node, theirs.node(q.prefix));
        PLEXUS_RETURN_IF_ERROR(walk.NodeAnswered(q.prefix, node.first, node.second));
      } else {
        PLEXUS_ASSIGN_OR_RETURN(std::vector<std::string> entries, theirs.entries_under(q.prefix));
        PLEXUS_RETURN_IF_ERROR(walk.EntriesAnswered(q.prefix, entries));
      }
    }
  }
  if (node_hashes) *node_hashes = walk.node_hashes();
  return walk.missing();
}

std::vector<std::string> MissingFrom(const MerkleDigest& mine, const MerkleDigest& theirs, size_t* node_hashes) {
  DigestSource local{
      [&](const std::string& prefix) -> Result<std::pair<std::string, bool>> { return theirs.Node(prefix); },
      [&](const std::string& prefix) -> Result<std::vector<std::string>> { return theirs.EntriesUnder(prefix); }};
  return *MissingFrom(mine, local, node_hashes);  // a local source cannot fail
}

}  // namespace plexus
