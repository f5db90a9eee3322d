#include "server/rpc/proto_conversion.h"

namespace plexus {

grpc::Status ToGrpc(const Status& s) {
  if (s.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(static_cast<int>(s.code())), s.message());
}

void TaskToProto(const Task& t, int64_t now_ms, v1::TrainingTask* out) {
  out->set_task_id(t.task_id);
  out->set_round(t.round);
  out->set_model_version(t.model_version);
  out->set_model_sha256(t.model_sha256);
  if (t.model_crc32c) out->set_model_crc32c(*t.model_crc32c);
  out->set_local_epochs(t.hyperparams.local_epochs);
  out->set_local_steps(t.hyperparams.local_steps);
  out->set_batch_size(t.hyperparams.batch_size);
  out->set_learning_rate(t.hyperparams.learning_rate);
  out->set_momentum(t.hyperparams.momentum);
  out->set_optimizer(t.hyperparams.optimizer);
  out->set_weight_decay(t.hyperparams.weight_decay);
  out->mutable_config()->insert(t.hyperparams.config.begin(), t.hyperparams.config.end());
  out->set_deadline_in_ms(t.deadline_ms - now_ms);
  out->set_evaluate_only(t.evaluate_only);
}

Update UpdateFromHeader(const v1::UpdateHeader& header, ModelState values) {
  Update u;
  u.client_id = header.client_id();
  u.task_id = header.task_id();
  u.base_version = header.base_version();
  u.num_examples = header.num_examples();
  u.local_steps = header.local_steps();
  for (const auto& [k, v] : header.metrics()) u.metrics[k] = v;
  u.delta = std::move(values);
  return u;
}

void EngineStatusToProto(const EngineStatus& s, v1::StatusReply* rep) {
  rep->set_mode(s.mode);
  rep->set_round(s.round);
  rep->set_model_version(s.model_version);
  rep->set_known_clients(s.known_clients);
  rep->set_connected_clients(s.connected_clients);
  rep->set_round_selected(s.round_selected);
  rep->set_round_received(s.round_received);
  rep->set_updates_accepted(s.updates_accepted);
  rep->set_updates_refused(s.updates_refused);
  rep->set_updates_stale(s.updates_stale);
  rep->set_has_accuracy(s.last_accuracy.has_value());
  rep->set_last_accuracy(s.last_accuracy.value_or(0.0));
  rep->set_has_federated_accuracy(s.last_federated_accuracy.has_value());
  rep->set_last_federated_accuracy(s.last_federated_accuracy.value_or(0.0));
  rep->set_federated_version(s.federated_version);
  rep->set_finished(s.finished);
  rep->set_error(s.error);
  rep->set_secure_stage(s.secure_stage);
  rep->set_secure_rounds_aborted(s.secure_rounds_aborted);
  rep->set_last_secure_abort(s.last_secure_abort);
  for (const ClientSchedule& c : s.schedule) {
    v1::ClientSchedule* out = rep->add_schedule();
    out->set_client_id(c.client_id);
    out->set_has_speed(c.ms_per_step.has_value());
    out->set_ms_per_step(c.ms_per_step.value_or(0.0));
    out->set_local_steps(c.local_steps);
    out->set_group(c.group);
  }
}

void MergedToProto(const std::vector<MergedUpdate>& merged, v1::StatusReply* rep) {
  for (const MergedUpdate& m : merged) {
    v1::MergedUpdate* out = rep->add_last_merged();
    out->set_client_id(m.client_id);
    out->set_task_id(m.task_id);
    out->set_staleness(m.staleness);
    out->set_group(m.group);
    out->set_has_speed(m.ms_per_step.has_value());
    out->set_ms_per_step(m.ms_per_step.value_or(0.0));
  }
}

}  // namespace plexus
