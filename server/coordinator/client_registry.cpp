#include "server/coordinator/client_registry.h"

namespace plexus {

Result<std::string> ClientRegistry::Join(const ClientRecord& client) {
  ClientRecord rec = client;
  if (rec.num_examples < 0) return InvalidArgumentError("num_examples must not be negative");
  if (rec.id.empty()) {
    size_t n = known_.size() + 1;
    while (known_.count("client-" + std::to_string(n))) ++n;
    rec.id = "client-" + std::to_string(n);
  } else if (rec.id.size() > 128) {
    return InvalidArgumentError("client id longer than 128 characters");
  }
  PLEXUS_RETURN_IF_ERROR(store_->PutClient(rec).WithContext("register client " + rec.id));
  known_.insert(rec.id);
  Touch(rec.id);
  return rec.id;
}

Status ClientRegistry::Admit(const std::string& id) {
  if (!known_.count(id)) return NotFoundError("unknown client id '" + id + "'; join first");
  Touch(id);
  return Status::Ok();
}

std::vector<std::string> ClientRegistry::Connected() const {
  const int64_t now = clock_->NowMs();
  std::vector<std::string> out;
  for (const auto& [id, seen] : last_seen_ms_) {
    if (now - seen <= timeout_ms_) out.push_back(id);
  }
  return out;
}

}  // namespace plexus
