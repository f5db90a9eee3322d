#include "server/rpc/upload_places.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace plexus {

UploadPlaces::Place::Place(UploadPlaces* places, const UploadCall* call, const std::string& client)
    : places_(places), call_(call), client_(client) {
  const Limits& limits = places_->limits_;
  std::unique_lock<std::mutex> lock(places_->mu_);
  if (places_->clients_.count(client_)) {
    status_ = ResourceExhaustedError("client '" + client_ + "' already has an upload in flight: one at a time");
    return;
  }
  slow_ = places_->slow_senders_.count(client_) > 0;
  if (limits.max_concurrent > 0) {
    auto free = [this] {
      return places_->receiving_ < places_->limits_.max_concurrent &&
             (!slow_ || places_->receiving_slow_ < places_->SlowSendersPlaces());
    };
    if (limits.wait_ms > 0) {
      if (!places_->freed_.wait_for(lock, std::chrono::milliseconds(limits.wait_ms), free)) {
        status_ = ResourceExhaustedError(
            fmt::format("all {} upload places stayed busy for {} ms (--max-concurrent-uploads): retry later",
                        limits.max_concurrent, limits.wait_ms));
        return;
      }
    } else {
      places_->freed_.wait(lock, free);
    }
    ++places_->receiving_;
    if (slow_) ++places_->receiving_slow_;
  }
  places_->clients_.insert(client_);
  const int64_t now = places_->clock_->NowMs();
  places_->holders_[call_] = Holder{client_, now, now, 0};
  held_ = true;
}

UploadPlaces::Place::~Place() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(places_->mu_);
  places_->clients_.erase(client_);
  places_->holders_.erase(call_);
  places_->cancelled_.erase(call_);
  if (places_->limits_.max_concurrent > 0) {
    --places_->receiving_;
    if (slow_) --places_->receiving_slow_;
  }
  places_->freed_.notify_all();  // waiters differ: a slow sender may not take what a fast one may
}

void UploadPlaces::Place::Progress(size_t bytes) {
  std::lock_guard<std::mutex> lock(places_->mu_);
  auto it = places_->holders_.find(call_);
  places_->received_bytes_ += static_cast<int64_t>(bytes);
  if (it == places_->holders_.end()) return;
  Holder& h = it->second;
  h.last_chunk_ms = places_->clock_->NowMs();
  h.window_bytes += static_cast<int64_t>(bytes);
}

void UploadPlaces::Place::Received() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(places_->mu_);
  places_->holders_.erase(call_);
}

void UploadPlaces::CancelStalled() {
  const bool rate = limits_.min_bytes_per_s > 0 && limits_.rate_window_ms > 0;
  if (limits_.stall_ms <= 0 && !rate) return;
  const int64_t now = clock_->NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [call, h] : holders_) {
    if (cancelled_.count(call)) continue;
    std::string why;
    if (limits_.stall_ms > 0 && now - h.last_chunk_ms >= limits_.stall_ms) {
      why = fmt::format("delivered nothing for {} ms", now - h.last_chunk_ms);
    } else if (rate && now - h.window_start_ms >= limits_.rate_window_ms) {
      const int64_t window = now - h.window_start_ms;
      if (h.window_bytes * 1000 < limits_.min_bytes_per_s * window) {
        why = fmt::format("delivered {} bytes in {} ms, below {} bytes/s", h.window_bytes, window,
                          limits_.min_bytes_per_s);
      } else {
        h.window_start_ms = now;
        h.window_bytes = 0;
      }
    }
    if (why.empty()) continue;
    spdlog::warn("upload from {} ({}) {}: cancelled (what arrived is kept for a resume)", h.client, call->peer, why);
    cancelled_.insert(call);
    slow_senders_.insert(h.client);
    if (call->cancel) call->cancel();
  }
}

}  // namespace plexus
