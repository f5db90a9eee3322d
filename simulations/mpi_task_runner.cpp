#include "simulations/mpi_task_runner.h"

#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <limits>
#include <string>
#include <type_traits>

#include "core/safetensors.h"
#include "simulations/task_wire.h"

namespace plexus {
namespace {

// Message tags. From rank 0: a base model, a job, a fetch, stop; to rank 0: an outcome.
enum Tag : int { kBase = 1, kJob = 2, kFetch = 3, kStop = 4, kOutcome = 5 };

// MPI counts a message's bytes in an int: a larger message is refused here, not truncated.
Result<int> MpiCount(size_t bytes) {
  if (bytes > static_cast<size_t>(std::numeric_limits<int>::max())) {
    return ResourceExhaustedError("a message of " + std::to_string(bytes) +
                                  " bytes exceeds MPI's limit of 2^31 - 1 bytes per message (a model that large "
                                  "cannot be spread over MPI ranks)");
  }
  return static_cast<int>(bytes);
}

Status MpiError(const char* call, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return InternalError(std::string(call) + " failed: " + std::string(text, static_cast<size_t>(len)));
}

// Receives the next message from `source` with `tag` (MPI_ANY_TAG: any), whatever its size.
Status Receive(int source, int tag, int* got_tag, std::string* bytes) {
  MPI_Status st;
  if (int rc = MPI_Probe(source, tag, MPI_COMM_WORLD, &st); rc != MPI_SUCCESS) return MpiError("MPI_Probe", rc);
  int count = 0;
  MPI_Get_count(&st, MPI_BYTE, &count);
  bytes->resize(static_cast<size_t>(count));
  if (int rc = MPI_Recv(bytes->data(), count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      rc != MPI_SUCCESS) {
    return MpiError("MPI_Recv", rc);
  }
  *got_tag = st.MPI_TAG;
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<MpiSession>> MpiSession::Start() {
  if (int rc = MPI_Init(nullptr, nullptr); rc != MPI_SUCCESS) return MpiError("MPI_Init", rc);
  // Errors come back as codes (turned into Status), not as the default abort.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return std::unique_ptr<MpiSession>(new MpiSession(rank, size));
}

void MpiSession::Abort(std::string_view why) const {
  std::fprintf(stderr, "plexus: error (MPI rank %d of %d): %.*s\n", rank_, size_, static_cast<int>(why.size()),
               why.data());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();  // MPI_Abort does not return; this tells the compiler so
}

MpiSession::~MpiSession() {
  if (std::uncaught_exceptions() > 0) MPI_Abort(MPI_COMM_WORLD, 1);
  MPI_Finalize();
}

// Nonblocking sends of jobs, fetches and stops (small: they go out at once), so that rank 0 need
// not wait for a busy rank to take its next job; each send's bytes live here until MPI is done.
struct MpiTaskRunner::Outbox {
  struct Send {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string bytes;
  };
  std::deque<Send> sends;  // deque: elements stay put while others are added

  Status Post(int rank, Tag tag, std::string bytes) {
    PLEXUS_ASSIGN_OR_RETURN(const int count, MpiCount(bytes.size()));
    Send& s = sends.emplace_back();
    s.bytes = std::move(bytes);
    if (int rc = MPI_Isend(s.bytes.data(), count, MPI_BYTE, rank, tag, MPI_COMM_WORLD, &s.request); rc != MPI_SUCCESS) {
      sends.pop_back();
      return MpiError("MPI_Isend", rc);
    }
    // Release what is done from the front (sends complete roughly in order).
    while (!sends.empty()) {
      int done = 0;
      MPI_Test(&sends.front().request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      sends.pop_front();
    }
    return Status::Ok();
  }
  void WaitAll() {
    for (Send& s : sends) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
    sends.clear();
  }
};

MpiTaskRunner::MpiTaskRunner(const MpiSession* session, Trainer* trainer, const Dataset* train)
    : size_(session->size()),
      local_(trainer, train),
      rank_base_(static_cast<size_t>(session->size())),
      fetched_(static_cast<size_t>(session->size())),
      outbox_(std::make_unique<Outbox>()) {}

MpiTaskRunner::~MpiTaskRunner() {
  // Outcomes fetched for jobs the run no longer finished (it ended first) are taken off the wire:
  // their ranks wait for every send to be received before they stop.
  for (int r = 1; r < size_; ++r) {
    for (size_t left = fetched_[static_cast<size_t>(r)].size(); left > 0; --left) {
      int tag = 0;
      std::string bytes;
      if (!Receive(r, kOutcome, &tag, &bytes).ok()) break;
    }
  }
  for (int r = 1; r < size_; ++r) (void)outbox_->Post(r, kStop, {});
  outbox_->WaitAll();
}

Status MpiTaskRunner::Start(uint64_t key, TrainJob job) {
  // In cycles of 3R - 1 jobs: two for rank 0, three for each other rank (header).
  const uint64_t slot = dealt_++ % (3 * static_cast<uint64_t>(size_) - 1);
  const int rank = slot < 2 ? 0 : 1 + static_cast<int>((slot - 2) % static_cast<uint64_t>(size_ - 1));
  if (rank == 0) return local_.Start(key, std::move(job));
  if (job.options.optimizer_state) {  // the moments live in this process, per client
    return FailedPreconditionError(
        "--optimizer adamw keeps each client's moments in the simulator's process: run it without MPI ranks");
  }
  if (!remote_.emplace(key, Remote{rank, job.base}).second) {
    return InternalError("training job " + std::to_string(key) + " started twice");
  }
  std::shared_ptr<const ModelState>& held = rank_base_[static_cast<size_t>(rank)];
  if (held != job.base) {
    // A blocking send: a model is too large to go out at once, and a nonblocking send would
    // only move while this rank is inside MPI, not while it trains its own share.
    const std::string model = EncodeSafetensors(*job.base);
    PLEXUS_ASSIGN_OR_RETURN(const int count, MpiCount(model.size()));
    if (int rc = MPI_Send(model.data(), count, MPI_BYTE, rank, kBase, MPI_COMM_WORLD); rc != MPI_SUCCESS) {
      return MpiError("MPI_Send", rc);
    }
    held = job.base;
  }
  return outbox_->Post(rank, kJob, EncodeJob(key, job));
}

Status MpiTaskRunner::WillFinish(std::span<const uint64_t> keys) {
  for (uint64_t key : keys) {
    auto it = remote_.find(key);
    if (it == remote_.end() || it->second.fetched) continue;
    PLEXUS_RETURN_IF_ERROR(outbox_->Post(it->second.rank, kFetch, EncodeFetch(key)));
    it->second.fetched = true;
    fetched_[static_cast<size_t>(it->second.rank)].push_back(key);
  }
  return Status::Ok();
}

Result<TrainOutcome> MpiTaskRunner::Finish(uint64_t key) {
  auto it = remote_.find(key);
  if (it == remote_.end()) return local_.Finish(key);
  const Remote job = std::move(it->second);
  remote_.erase(it);
  std::deque<uint64_t>& asked = fetched_[static_cast<size_t>(job.rank)];
  if (!job.fetched) {
    PLEXUS_RETURN_IF_ERROR(outbox_->Post(job.rank, kFetch, EncodeFetch(key)));
    asked.push_back(key);
  }
  // The rank answers fetches in the order they were sent: outcomes asked for before this one are
  // kept until their own Finish.
  std::string bytes;
  if (auto kept = received_.find(key); kept != received_.end()) {
    bytes = std::move(kept->second);
    received_.erase(kept);
  } else {
    for (;;) {
      if (asked.empty()) return InternalError("training job " + std::to_string(key) + " was never fetched");
      const uint64_t next = asked.front();
      asked.pop_front();
      int tag = 0;
      PLEXUS_RETURN_IF_ERROR(Receive(job.rank, kOutcome, &tag, &bytes));
      if (next == key) break;
      received_[next] = std::move(bytes);
    }
  }
  PLEXUS_ASSIGN_OR_RETURN(TrainOutcome out, DecodeOutcome(bytes, job.rank));
  out.weights.set_version(job.base->version());
  return out;
}

Status ServeMpiTrainingJobs(Trainer* trainer, const Dataset& train) {
  // Everything rank 0 sent is taken in as soon as this rank is between jobs; a fetch goes first
  // (its job is trained next if it is not yet), so rank 0 never waits for jobs dealt after the
  // one it needs. Jobs otherwise train in the order they came.
  std::shared_ptr<const ModelState> base;
  std::map<uint64_t, TrainJob> queued;       // by key; each holds the base it came after
  std::deque<uint64_t> arrival;              // keys of `queued`, oldest first
  std::deque<uint64_t> fetches;              // asked for, not yet answered
  std::map<uint64_t, std::string> outcomes;  // trained, not yet fetched
  struct OutgoingOutcome {
    MPI_Request request;
    std::string bytes;
  };
  std::deque<OutgoingOutcome> sending;  // fetched, on their way to rank 0 (node-stable: MPI holds the pointers)
  bool stop = false;
  auto take_in = [&](bool wait) -> Status {
    for (bool block = wait;; block = false) {
      int pending = 1;
      // Open MPI's probe looks before it polls the wire, so a message that is there only
      // shows on the second look; without it a fetch would wait one more job.
      for (int look = 0; !block && look < 2 && (look == 0 || !pending); ++look) {
        MPI_Iprobe(0, MPI_ANY_TAG, MPI_COMM_WORLD, &pending, MPI_STATUS_IGNORE);
      }
      if (!pending) return Status::Ok();
      int tag = 0;
      std::string bytes;
      PLEXUS_RETURN_IF_ERROR(Receive(0, MPI_ANY_TAG, &tag, &bytes));
      switch (tag) {
        case kBase: {
          PLEXUS_ASSIGN_OR_RETURN(ModelState m, DecodeSafetensors(bytes));
          base = std::make_shared<const ModelState>(std::move(m));
          break;
        }
        case kJob: {
          uint64_t key = 0;
          TrainJob job;
          if (!DecodeJob(bytes, &key, &job) || !base) return InternalError("malformed training job from rank 0");
          job.base = base;
          queued[key] = std::move(job);
          arrival.push_back(key);
          break;
        }
        case kFetch: {
          uint64_t key = 0;
          if (!DecodeFetch(bytes, &key) || (!queued.count(key) && !outcomes.count(key))) {
            return InternalError("rank 0 fetched a job this rank does not hold");
          }
          fetches.push_back(key);
          break;
        }
        case kStop:
          stop = true;
          break;
        default:
          return InternalError("unknown message tag " + std::to_string(tag) + " from rank 0");
      }
    }
  };
  auto train_now = [&](uint64_t key) {
    auto it = queued.find(key);
    outcomes[key] = EncodeOutcome(TrainJobWith(trainer, train, it->second));
    queued.erase(it);
    arrival.erase(std::find(arrival.begin(), arrival.end(), key));
  };
  for (;;) {
    PLEXUS_RETURN_IF_ERROR(take_in(/*wait=*/false));
    // Outcomes go out without waiting for rank 0 to take them (it may be training its own share
    // while several fetches are asked at once); each buffer lives until its send is done.
    while (!sending.empty()) {
      int done = 0;
      MPI_Test(&sending.front().request, &done, MPI_STATUS_IGNORE);
      if (!done) break;
      sending.pop_front();
    }
    if (!fetches.empty()) {
      const uint64_t key = fetches.front();
      if (!outcomes.count(key)) train_now(key);
      auto out = outcomes.find(key);
      PLEXUS_ASSIGN_OR_RETURN(const int count, MpiCount(out->second.size()));
      sending.push_back({MPI_REQUEST_NULL, std::move(out->second)});
      outcomes.erase(out);
      fetches.pop_front();
      OutgoingOutcome& sent = sending.back();
      if (int rc = MPI_Isend(sent.bytes.data(), count, MPI_BYTE, 0, kOutcome, MPI_COMM_WORLD, &sent.request);
          rc != MPI_SUCCESS) {
        return MpiError("MPI_Isend", rc);
      }
    } else if (!arrival.empty()) {
      train_now(arrival.front());
    } else if (stop) {
      for (OutgoingOutcome& o : sending) MPI_Wait(&o.request, MPI_STATUS_IGNORE);
      return Status::Ok();
    } else {
      PLEXUS_RETURN_IF_ERROR(take_in(/*wait=*/true));
    }
  }
}

}  // namespace plexus
