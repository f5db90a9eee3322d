#include "server/coordinator/client_registry.h"

namespace plexus {

Result<std::string> ClientRegistry::Join(const ClientRecord& client) {
  ClientRecord rec = client;
  if (rec.num_examples < 0 || rec.num_examples > (int64_t{1} << 40)) {
    return InvalidArgumentError("num_examples must lie in [0, 2^40]");
  }
  if (rec.device.size() > 256) return InvalidArgumentError("device description longer than 256 characters");
  if (rec.id.empty()) {
    size_t n = last_seen_ms_.size() + 1;
    while (last_seen_ms_.count("client-" + std::to_string(n))) ++n;
    rec.id = "client-" + std::to_string(n);
  } else if (rec.id.size() > 128) {
    return InvalidArgumentError("client id longer than 128 characters");
  }
  PLEXUS_RETURN_IF_ERROR(store_->PutClient(rec).WithContext("register client " + rec.id));
  last_seen_ms_[rec.id] = clock_->NowMs();
  return rec.id;
}

Status ClientRegistry::Admit(const std::string& id) {
  PLEXUS_RETURN_IF_ERROR(CheckKnown(id));
  last_seen_ms_[id] = clock_->NowMs();
  return Status::Ok();
}

Status ClientRegistry::CheckKnown(const std::string& id) const {
  if (!last_seen_ms_.count(id)) return NotFoundError("unknown client id '" + id + "'; join first");
  return Status::Ok();
}

std::vector<const std::string*> ClientRegistry::ConnectedIds() const {
  const int64_t now = clock_->NowMs();
  std::vector<const std::string*> out;
  for (const auto& [id, seen] : last_seen_ms_) {
    if (seen != kNeverHeard && now - seen <= timeout_ms_) out.push_back(&id);
  }
  return out;
}

std::vector<std::string> ClientRegistry::Connected() const {
  std::vector<std::string> out;
  for (const std::string* id : ConnectedIds()) out.push_back(*id);
  return out;
}

}  // namespace plexus
