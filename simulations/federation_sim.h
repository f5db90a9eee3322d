// FederationSim: one simulated federation (RunSimulation, sim_runner.h) in virtual time, private to
// simulations/. The event loop, polls, tasks and uploads are in federation_sim.cpp; secure
// aggregation's members (their SecAgg+ calls and views as messages) in federation_sim_secure.cpp.
// Single-threaded.
#pragma once

#include "simulations/sim_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>

#include "client/client_session.h"
#include "client/secure_member_session.h"
#include "compression/codec.h"
#include "compression/coded_downloads.h"
#include "compute/model_zoo.h"
#include "core/clock.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "privacy/gaussian_noise.h"
#include "server/coordinator/engine_factory.h"
#include "server/store/memory_store.h"
#include "simulations/attack.h"
#include "simulations/client_data.h"
#include "simulations/event_network.h"

namespace plexus {

// One federation in virtual time, on an EventNetwork: node 0 is the server, node i + 1 client i
// (with the device's latency and bandwidth; the server's link per SimOptions::server_mbps). A
// task is a model download (a message from the server), the local steps (a timer) and the update
// upload (a message to the server); the update is submitted when its last byte arrives. Engine
// deadlines fire from a tick every 100 virtual ms. Handlers capture `this` and a client index
// only, so an event costs no allocation.
class FederationSim {
 public:
  static constexpr int64_t kTickMs = 100;  // engine deadlines fire from a tick this often (virtual ms)
  // The engine's name for client i.
  static std::string ClientName(size_t i);

  FederationSim(const SimOptions& o, const Dataset& train, TaskRunner* runner, ClientData data, Engine* engine,
                ManualClock* clock, size_t model_bytes, const std::function<void(const SimRound&)>& on_round);

  Result<SimResult> Run();

 private:
  // A task on its way: its training job was started at hand-out and is finished when its upload
  // arrives (the runner decides when and where it trains). Omniscient attacks (ipm, alie,
  // minmax) need every honest update of a version as soon as it is handed out, and finish at once.
  struct InFlight {
    Task task;
    std::shared_ptr<const ModelState> base;
    std::optional<Update> update;  // once trained
  };

  EventNetwork::NodeId Node(size_t i) const { return static_cast<EventNetwork::NodeId>(i + 1); }
  double Elapsed() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }
  bool BudgetSpent() const { return o_.max_tasks > 0 && handed_out_ >= o_.max_tasks; }
  // Client i polls `delay_ms` from now.
  void Schedule(double delay_ms, size_t i);
  // `clients` poll now, in order: one event for all of them, which runs them exactly as one event
  // each would (one after the other at this moment, before anything their polls schedule) without
  // an event queued per client: a million queued polls, as at the start and whenever the parked
  // clients wake, cost more memory than the idle clients themselves.
  void PollNow(std::vector<uint32_t> clients);
  // Every handler ends here: an error stops the run, as does the end of the federation.
  void Guard(const Status& s);
  void SetClock() { clock_->SetMs(std::llround(net_.now_ms())); }
  int64_t now_ms() const { return std::llround(net_.now_ms()); }
  // Client i's session, made when it has none (a session at rest is dropped: a new one decides
  // the same).
  ClientSession& SessionOf(size_t i);

  void WakeParked();
  void WakeIfEpochMoved();
  void ReportNewVersions();

  // Engine deadlines fire from ticks; a tick may also move the epoch, and every half client
  // timeout the parked clients poll anyway (so that they stay connected).
  void Tick();

  Status ClientPolls(size_t i);

  Result<Update> FinishTraining(size_t i, const InFlight& f);

  Status UpdateArrives(size_t i);

  // --- Edges (SimOptions::edges): node n + 1 + e is edge e; client i reports to edge i mod E.
  struct Edge {
    std::set<uint64_t> fetching;                                     // versions on their way from the server
    std::optional<uint64_t> cached;                                  // the newest version it holds
    std::map<uint64_t, std::vector<EventNetwork::Handler>> waiting;  // downloads waiting for that version
    std::map<uint64_t, int64_t> outstanding;                         // by base version: tasks not yet reported
    std::map<uint64_t, std::vector<uint32_t>> arrived;               // by base version: updates held
  };
  EventNetwork::NodeId EdgeNode(size_t e) const { return static_cast<EventNetwork::NodeId>(n_ + 1 + e); }
  // Client i's task on `version` through its edge: the download (after the edge has the model),
  // the local steps, the upload to the edge.
  void StartViaEdge(size_t i, uint64_t version, size_t download_bytes, double compute_ms);
  // Client i's update has reached edge e; the edge forwards its partial when nothing is outstanding.
  Status EdgeReceives(size_t i, size_t e);

  // --- Secure aggregation: each virtual member runs plexus client's SecureMemberSession; its
  // calls and the server's answers travel the network with their payload's bytes, and the real
  // CPU each side spends is charged to it as virtual time before its next message goes out.
  struct SecureMember {
    Task task;
    std::shared_ptr<const ModelState> start;
    size_t download_bytes = 0;
    double compute_ms = 0;
    uint64_t batch_seed = 0;
    std::optional<SecureMemberSession> session;
    int drop_at = -1;  // the stage (secagg::Server::Stage) it goes silent at; -1: it stays
    double cpu_ms = 0;
  };

  // Client i's training options for `task`: with --optimizer adamw, its kept moments lent to the job.
  TrainOptions TrainingOptions(size_t i, const Task& task, uint64_t batch_seed);

  SimResult::SecureAggregation& SecureStats();
  static double MsSince(std::chrono::steady_clock::time_point began);
  double NoteServerCall(std::chrono::steady_clock::time_point began);

  Status StartSecureTask(size_t i, const Task& task, std::shared_ptr<const ModelState> start, size_t download_bytes,
                         double compute_ms, uint64_t batch_seed);

  void SecureCall(size_t i, secagg::Call call, double delay_ms);

  Status SecureCallArrives(size_t i, const secagg::Call& call);

  Status SecureViewArrives(size_t i, const secagg::View& view);

  Status SecureTrained(size_t i);

  // A member whose update is in a published mean: its costs join the sums Run turns into means.
  void CountFinished(const SecureMember& m);

  // The member's task is over: in the published mean (OK) or not; it polls again as plexus client does.
  Status EndSecureTask(size_t i, const Status& outcome);

  // --secagg-dropout: the device is gone for this round; it is back a round deadline later.
  Status DropSecureMember(size_t i);

  const SimOptions& o_;
  const DeviceModel& dev_;
  const AttackSpec attack_spec_;
  const AttackKind attack_;
  const Dataset& train_;
  TaskRunner* const runner_;
  const ClientData data_;
  Engine* const engine_;
  ManualClock* const clock_;
  const size_t model_bytes_;
  const std::unique_ptr<Codec> codec_;     // null: uploads travel as float32
  size_t upload_bytes_ = 0;                // of one upload: model_bytes_, or its encoded size
  std::map<size_t, ModelState> residual_;  // per client: the codec's error feedback (top-k)
  // Per client that trained with --optimizer adamw: its moments, carried from task to task as a
  // real client keeps them (node-based: the pointer a training job holds stays valid).
  std::unordered_map<size_t, OptimizerState> optimizer_states_;
  std::unique_ptr<CodedDownloads> coded_downloads_;  // null: downloads travel as float32
  std::vector<std::string> held_;  // per client, with coded downloads: the SHA-256 of what it rebuilt last
  const std::function<void(const SimRound&)>& on_round_;
  const size_t n_;
  const std::vector<double> ms_per_step_;
  DeviceAvailability availability_;
  const bool train_at_handout_;
  std::vector<uint32_t> tasks_of_;
  std::vector<int64_t> local_dp_releases_;  // with local DP: noised updates each client sent
  std::vector<bool> malicious_;
  double alie_z_ = 0.0;
  std::map<uint64_t, HonestStats> honest_;  // by base version: what omniscient attackers see
  std::vector<Edge> edges_;
  size_t partial_bytes_ = 0;  // one partial sum on the wire (ExactSum::Encode)

  EventNetwork net_;
  int64_t pending_ = 0;           // client events scheduled (polls, tasks under way)
  std::vector<uint32_t> parked_;  // told to wait; they poll again when the epoch moves
  uint64_t parked_epoch_ = 0;
  int64_t wave_ms_ = 0;
  double next_wave_ms_ = 0.0;
  std::map<size_t, InFlight> in_flight_;
  std::map<size_t, SecureMember> secure_;                 // with secure aggregation: members in a group
  ClientSessionOptions session_options_;                  // the seed's backoff jitter, the defaults otherwise
  std::unordered_map<uint32_t, ClientSession> sessions_;  // clients whose session is not at rest
  std::shared_ptr<const ModelState> current_base_;        // shared by the tasks handed out on it
  int64_t handed_out_ = 0;
  int64_t bytes_down_ = 0, bytes_up_ = 0;
  size_t reported_ = 0;
  Status failure_;
  SimResult result_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace plexus
