// MPI scale-out of the simulator: `mpirun -np R plexus sim ...`. Rank 0 runs the simulation
// (coordinator, event loop, evaluation); its MpiTaskRunner deals the training jobs over all R
// ranks, rank 0 two thirds of a share (two jobs in 3R - 1, the others three each: rank 0 also
// runs the engine, the network and the folds, a quarter of a round of the simulated
// million-client tree outside training; with two ranks this split measured 9.3-9.7 s per round of
// that tree against 10.5-10.8 s for one job in three and 11.0 s for half the jobs), and trains
// its own share itself at Finish, as LocalTaskRunner does. Ranks
// 1..R-1 run ServeMpiTrainingJobs: each job is trained as it arrives and its outcome kept until
// rank 0 fetches it, so the ranks train while rank 0 goes on handing out tasks. Every rank
// trains with the same code, data and thread count, so a run's result equals the single-process
// run's bit for bit. What travels: each base model once per rank, then per job its options and
// example indices one way and the trained weights the other. MPI keeps the order of messages
// between two ranks, which the protocol relies on (a base before its jobs, a job before its fetch).
// Built only when CMake finds MPI (PLEXUS_WITH_MPI); mpi.h stays inside the .cpp.
// Not thread-safe: one thread per process talks MPI.
#pragma once

#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "simulations/task_runner.h"

namespace plexus {

// Whether mpirun (OpenMPI, or a PMI launcher) started this process as one of several ranks.
// Header-only so that a build without MPI can tell its user.
inline bool LaunchedWithSeveralMpiRanks() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"}) {
    if (const char* v = std::getenv(var); v && std::atoi(v) > 1) return true;
  }
  return false;
}

// This process's place in an MPI job, started only when LaunchedWithSeveralMpiRanks(); otherwise
// MPI is never initialised. The destructor finalises MPI, or, while an exception is unwinding,
// aborts the whole job so that no rank waits forever.
class MpiSession {
 public:
  // Initialises MPI; Internal when it fails.
  static Result<std::unique_ptr<MpiSession>> Start();
  ~MpiSession();
  // A failed run: says why on stderr and ends every rank of the job.
  [[noreturn]] void Abort(std::string_view why) const;
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

 private:
  MpiSession(int rank, int size) : rank_(rank), size_(size) {}
  const int rank_, size_;
};

// Rank 0's runner. Borrows the session, trainer and data.
class MpiTaskRunner : public TaskRunner {
 public:
  MpiTaskRunner(const MpiSession* session, Trainer* trainer, const Dataset* train);
  // Tells every other rank to stop once the messages before it are done.
  ~MpiTaskRunner() override;
  Status Start(uint64_t key, TrainJob job) override;
  Result<TrainOutcome> Finish(uint64_t key) override;
  // Sends the fetches of the remote jobs among `keys` at once: their ranks train them in that
  // order while this rank trains its own.
  Status WillFinish(std::span<const uint64_t> keys) override;

 private:
  struct Outbox;  // sends in flight and the bytes they read
  struct Remote {
    int rank = 0;
    std::shared_ptr<const ModelState> base;
    bool fetched = false;  // asked for by WillFinish
  };
  const int size_;
  LocalTaskRunner local_;
  uint64_t dealt_ = 0;
  std::map<uint64_t, Remote> remote_;                         // jobs dealt to other ranks
  std::vector<std::shared_ptr<const ModelState>> rank_base_;  // the base each rank holds last
  // Per rank: the jobs fetched and not yet received, in the order the rank answers them.
  std::vector<std::deque<uint64_t>> fetched_;
  std::map<uint64_t, std::string> received_;  // outcomes received before their Finish
  std::unique_ptr<Outbox> outbox_;
};

// Ranks 1..R-1: serves rank 0's jobs until it says stop. Errors: a malformed message (Internal);
// a job's own training error goes back to rank 0 instead.
Status ServeMpiTrainingJobs(Trainer* trainer, const Dataset& train);

}  // namespace plexus
