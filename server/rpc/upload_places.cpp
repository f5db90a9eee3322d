#include "server/rpc/upload_places.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>

namespace plexus {

UploadPlaces::Place::Place(UploadPlaces* places, grpc::ServerContext* ctx, const std::string& client)
    : places_(places), ctx_(ctx), client_(client) {
  const Limits& limits = places_->limits_;
  std::unique_lock<std::mutex> lock(places_->mu_);
  if (places_->clients_.count(client_)) {
    status_ = ResourceExhaustedError("client '" + client_ + "' already has an upload in flight: one at a time");
    return;
  }
  if (limits.max_concurrent > 0) {
    auto free = [this] { return places_->receiving_ < places_->limits_.max_concurrent; };
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
  }
  places_->clients_.insert(client_);
  places_->last_chunk_ms_[ctx_] = places_->clock_->NowMs();
  held_ = true;
}

UploadPlaces::Place::~Place() {
  if (!held_) return;
  std::lock_guard<std::mutex> lock(places_->mu_);
  places_->clients_.erase(client_);
  places_->last_chunk_ms_.erase(ctx_);
  places_->cancelled_.erase(ctx_);
  if (places_->limits_.max_concurrent > 0) --places_->receiving_;
  places_->freed_.notify_one();
}

void UploadPlaces::Place::Progress(size_t bytes) {
  std::lock_guard<std::mutex> lock(places_->mu_);
  places_->last_chunk_ms_[ctx_] = places_->clock_->NowMs();
  places_->received_bytes_ += static_cast<int64_t>(bytes);
}

void UploadPlaces::CancelStalled() {
  if (limits_.stall_ms <= 0) return;
  const int64_t now = clock_->NowMs();
  std::lock_guard<std::mutex> lock(mu_);
  for (const auto& [ctx, last] : last_chunk_ms_) {
    if (now - last < limits_.stall_ms || cancelled_.count(ctx)) continue;
    spdlog::warn("upload from {} stalled for {} ms: cancelled (what arrived is kept for a resume)", ctx->peer(),
                 now - last);
    cancelled_.insert(ctx);
    ctx->TryCancel();
  }
}

}  // namespace plexus
