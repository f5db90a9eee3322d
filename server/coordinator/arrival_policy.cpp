#include "server/coordinator/arrival_policy.h"

namespace plexus {
namespace {

class BufferArrivals final : public ArrivalPolicy {
 public:
  explicit BufferArrivals(int64_t buffer_size) : buffer_size_(buffer_size) {}

  Mode mode() const override { return Mode::kAsync; }
  std::string Describe(const std::string& settings) const override {
    return "fedbuff(buffer=" + std::to_string(buffer_size_) + "," + settings + ")";
  }
  int64_t buffer_capacity() const override { return buffer_size_; }
  int64_t StepsFor(const std::string&, int64_t configured, int64_t) override { return configured; }
  void Abandon(const std::string&) override {}

  Status Arrive(LoggedUpdate accepted, int64_t, VersionBuilder* builder) override {
    PLEXUS_RETURN_IF_ERROR(builder->Fold(std::move(accepted), 0));
    return PublishIfFull(builder);
  }
  Status Restore(LoggedUpdate accepted, VersionBuilder* builder) override {
    // A fold refused now (a model of another layout) is forgotten with the next commit, like any
    // refused fold; it must not keep the server from starting.
    if (!builder->Fold(std::move(accepted), 0).ok()) return Status::Ok();
    return PublishIfFull(builder);
  }
  Status RestoreDone(VersionBuilder*) override { return Status::Ok(); }
  Status Tick(int64_t, VersionBuilder*) override { return Status::Ok(); }
  void FoldAllHeld(VersionBuilder*) override {}

 private:
  Status PublishIfFull(VersionBuilder* builder) {
    return builder->folded() >= static_cast<size_t>(buffer_size_) ? builder->Publish() : Status::Ok();
  }

  const int64_t buffer_size_;
};

}  // namespace

std::unique_ptr<ArrivalPolicy> MakeBufferArrivals(int64_t buffer_size) {
  return std::make_unique<BufferArrivals>(buffer_size);
}

}  // namespace plexus
