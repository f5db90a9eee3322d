// UploadPlaces: how many uploads the server receives and decodes at once (`max_concurrent`, so
// that many clients uploading together cannot exhaust its memory), with at most one upload in
// flight per client. An upload that cannot get a place within `wait_ms` is refused; one that
// holds a place but delivers nothing for `stall_ms`, or fewer than `min_bytes_per_s` over any
// `rate_window_ms` (a drip of one byte per 200 ms held a place as long as it liked), is cancelled
// (its handler then sees the stream end). A client once cancelled so is a slow sender: slow
// senders together hold at most max_concurrent - max_concurrent / 4 places, so that the rest stay
// for clients that never stalled (eight drips once stopped every other upload and every version).
// Time comes from the injected clock; the call an upload arrives on is seen through UploadCall,
// so the places run under a test without gRPC. Thread-safe.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>

#include "core/clock.h"
#include "core/status.h"

namespace plexus {

// The call an upload arrives on, as its place sees it: who sent it (for the log) and how to end
// it. `cancel` may run on another thread while the call is in flight (the server's ticker).
struct UploadCall {
  std::string peer;
  std::function<void()> cancel;
};

class UploadPlaces {
 public:
  struct Limits {
    int max_concurrent = 8;    // 0: no bound
    int64_t wait_ms = 30000;   // 0: wait without bound
    int64_t stall_ms = 30000;  // 0: never cancel
    // The slowest delivery kept, measured over each window of `rate_window_ms` an upload holds
    // its place. 0: no minimum.
    int64_t min_bytes_per_s = 1024;
    int64_t rate_window_ms = 5000;
  };
  UploadPlaces(const Limits& limits, const Clock* clock) : limits_(limits), clock_(clock) {}

  // One upload's place, given back when it goes out of scope. status() is OK when the upload
  // has it; otherwise ResourceExhausted: the client already has an upload in flight, or every
  // place stayed busy for the wait bound.
  class Place {
   public:
    // `call` is borrowed and outlives the place.
    Place(UploadPlaces* places, const UploadCall* call, const std::string& client);
    ~Place();
    Place(const Place&) = delete;
    Place& operator=(const Place&) = delete;

    const Status& status() const { return status_; }
    // A chunk of `bytes` arrived: the upload is making progress.
    void Progress(size_t bytes);
    // The whole payload arrived: the place is held while the update is submitted, no longer
    // watched for stalls (waiting for the server is not the client's slowness).
    void Received();

   private:
    UploadPlaces* const places_;
    const UploadCall* const call_;
    const std::string client_;
    Status status_;
    bool held_ = false;
    bool slow_ = false;  // counted among the slow senders' places
  };

  // Cancels the uploads that hold a place and delivered nothing for the stall bound (each once).
  void CancelStalled();
  // Payload bytes that arrived in uploads holding a place, accepted or not, since the start.
  int64_t received_bytes() const { return received_bytes_.load(); }

 private:
  const Limits limits_;
  const Clock* const clock_;
  std::mutex mu_;
  std::condition_variable freed_;
  struct Holder {
    std::string client;
    int64_t last_chunk_ms = 0;
    int64_t window_start_ms = 0;
    int64_t window_bytes = 0;
  };
  // Places slow senders may hold together.
  int SlowSendersPlaces() const { return limits_.max_concurrent - limits_.max_concurrent / 4; }

  int receiving_ = 0;                            // guarded by mu_; places taken (when bounded)
  int receiving_slow_ = 0;                       // guarded by mu_; of them, by slow senders
  std::set<std::string> clients_;                // guarded by mu_; clients with an upload in flight
  std::set<std::string> slow_senders_;           // guarded by mu_; clients cancelled for stalling
  std::map<const UploadCall*, Holder> holders_;  // guarded by mu_; uploads holding a place
  std::set<const UploadCall*> cancelled_;        // guarded by mu_; cancelled for stalling
  std::atomic<int64_t> received_bytes_{0};
};

}  // namespace plexus
