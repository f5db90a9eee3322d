#include "crdt/merkle_walk.h"

#include <string_view>

namespace plexus {
namespace {

constexpr std::string_view kHexDigits = "0123456789abcdef";

}  // namespace

MerkleWalk::MerkleWalk(MerkleDigest mine) : mine_(std::move(mine)) { queued_.push_back({Question::kNode, ""}); }

std::vector<MerkleWalk::Question> MerkleWalk::TakeQuestions() {
  std::vector<Question> out;
  out.swap(queued_);
  outstanding_.insert(out.begin(), out.end());
  return out;
}

Status MerkleWalk::Answered(const Question& q) {
  if (outstanding_.erase(q) == 0) {
    return InvalidArgumentError(std::string(q.kind == Question::kNode ? "a node hash" : "an entry list") +
                                " at prefix '" + q.prefix + "' nobody asked for");
  }
  return Status::Ok();
}

Status MerkleWalk::NodeAnswered(const std::string& prefix, const std::string& hash, bool leaf) {
  PLEXUS_RETURN_IF_ERROR(Answered({Question::kNode, prefix}));
  ++node_hashes_;
  const auto [my_hash, my_leaf] = mine_.Node(prefix);
  if (hash == my_hash || hash.empty()) return Status::Ok();
  if (leaf || my_leaf || prefix.size() >= 64) {
    // Small enough on one side: compare the entries themselves.
    queued_.push_back({Question::kEntriesUnder, prefix});
    return Status::Ok();
  }
  for (char digit : kHexDigits) queued_.push_back({Question::kNode, prefix + digit});
  return Status::Ok();
}

Status MerkleWalk::EntriesAnswered(const std::string& prefix, const std::vector<std::string>& entries) {
  PLEXUS_RETURN_IF_ERROR(Answered({Question::kEntriesUnder, prefix}));
  const std::vector<std::string> have = mine_.EntriesUnder(prefix);
  const std::set<std::string> mine(have.begin(), have.end());
  for (const std::string& e : entries) {
    if (!mine.count(e)) missing_.insert(e);
  }
  return Status::Ok();
}

}  // namespace plexus
