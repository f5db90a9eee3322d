// ClientStateDir on a real directory: what it gives back after a "restart" (a new object over
// the same files), and how it treats torn or mismatched files.
#include "client/client_state_dir.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

class ClientStateDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/state_dir_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    state_ = *ClientStateDir::Open(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::unique_ptr<ClientStateDir> Reopen() { return *ClientStateDir::Open(dir_); }

  static UploadHeader Header() {
    UploadHeader h;
    h.client_id = "edge-7";
    h.task_id = "r3a0-edge-7";
    h.base_version = 2;
    h.num_examples = 600;
    h.local_steps = 19;
    h.metrics["train_loss"] = 0.123456789012345;
    return h;
  }

  std::string dir_;
  std::unique_ptr<ClientStateDir> state_;
};

TEST_F(ClientStateDirTest, KeepsTheClientIdAcrossARestart) {
  EXPECT_EQ(state_->ClientId(), "");
  ASSERT_OK(state_->SaveClientId("client-12"));
  EXPECT_EQ(Reopen()->ClientId(), "client-12");
  EXPECT_THAT(state_->SaveClientId("a\nb"), testing::StatusIs(StatusCode::kInvalidArgument, "line break"));
}

TEST_F(ClientStateDirTest, AModelDownloadContinuesFromTheBytesKept) {
  ASSERT_OK(state_->AppendModelBytes(4, 0, "abc"));
  ASSERT_OK(state_->AppendModelBytes(4, 3, "def"));
  bool complete = true;
  EXPECT_EQ(Reopen()->ModelBytes(4, &complete), "abcdef");
  EXPECT_FALSE(complete);
  // An append that does not continue the file is refused, and the file is unchanged.
  EXPECT_THAT(state_->AppendModelBytes(4, 2, "zz"), testing::StatusIs(StatusCode::kFailedPrecondition, "holds 6"));
  ASSERT_OK(state_->CompleteModel(4));
  EXPECT_EQ(Reopen()->ModelBytes(4, &complete), "abcdef");
  EXPECT_TRUE(complete);
  // Another version's bytes are not this one's.
  EXPECT_EQ(state_->ModelBytes(5, &complete), "");
  EXPECT_FALSE(complete);
}

TEST_F(ClientStateDirTest, StartingANewVersionDropsTheOthers) {
  ASSERT_OK(state_->AppendModelBytes(4, 0, "old"));
  ASSERT_OK(state_->CompleteModel(4));
  ASSERT_OK(state_->AppendModelBytes(6, 0, "half"));
  ASSERT_OK(state_->AppendModelBytes(7, 0, "new"));
  bool complete = false;
  EXPECT_EQ(state_->ModelBytes(4, &complete), "");
  EXPECT_EQ(state_->ModelBytes(6, &complete), "");
  EXPECT_EQ(state_->ModelBytes(7, &complete), "new");
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir_)) ++files;
  EXPECT_EQ(files, 1u);
  state_->DropModel(7);
  EXPECT_EQ(state_->ModelBytes(7, &complete), "");
}

TEST_F(ClientStateDirTest, APendingUploadComesBackWhole) {
  ASSERT_OK(state_->SavePendingUpload(Header(), *Payload::Of(std::string(3000, 'x'))));
  std::optional<PendingUpload> p = Reopen()->LoadPendingUpload();
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->header.client_id, "edge-7");
  EXPECT_EQ(p->header.task_id, "r3a0-edge-7");
  EXPECT_EQ(p->header.base_version, 2u);
  EXPECT_EQ(p->header.num_examples, 600);
  EXPECT_EQ(p->header.local_steps, 19);
  EXPECT_EQ(p->header.metrics.at("train_loss"), 0.123456789012345);  // all 17 digits
  EXPECT_EQ(p->payload, std::string(3000, 'x'));
  state_->DropPendingUpload();
  EXPECT_FALSE(state_->LoadPendingUpload().has_value());
}

TEST_F(ClientStateDirTest, ATornOrAlteredPendingUploadIsDroppedNotSent) {
  ASSERT_OK(state_->SavePendingUpload(Header(), *Payload::Of(std::string(3000, 'x'))));
  {
    std::ofstream cut(dir_ + "/upload.safetensors", std::ios::binary | std::ios::trunc);
    cut << std::string(1000, 'x');  // a payload cut short (a crash of the machine, say)
  }
  EXPECT_FALSE(state_->LoadPendingUpload().has_value());
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/upload.safetensors"));  // removed

  ASSERT_OK(state_->SavePendingUpload(Header(), *Payload::Of("payload")));
  std::filesystem::remove(dir_ + "/upload.header");  // the save did not finish
  EXPECT_FALSE(state_->LoadPendingUpload().has_value());

  ASSERT_OK(state_->SavePendingUpload(Header(), *Payload::Of("payload")));
  {
    std::ofstream garbled(dir_ + "/upload.header", std::ios::app);
    garbled << "local_steps=many\n";
  }
  EXPECT_FALSE(state_->LoadPendingUpload().has_value());
}

TEST_F(ClientStateDirTest, ADirectoryThatCannotBeCreatedIsAClearError) {
  std::ofstream(dir_ + "/a-file") << "x";
  EXPECT_THAT(ClientStateDir::Open(dir_ + "/a-file/state").status(),
              testing::StatusIs(StatusCode::kInvalidArgument, "cannot create the state directory"));
}

// The directory's files are untrusted input (issue: a 10 GiB sparse model file read whole at
// every start; a planted symbolic link had the client append a model to another file).
TEST_F(ClientStateDirTest, AFileLargerThanItMayHoldIsDroppedUnread) {
  auto small = *ClientStateDir::Open(dir_, /*max_model_bytes=*/100);
  {
    std::ofstream f(dir_ + "/model-3.safetensors", std::ios::binary);
    f.seekp(10 << 20);  // sparse: 10 MB of size, nothing written
    f.put('x');
  }
  bool complete = true;
  EXPECT_EQ(small->ModelBytes(3, &complete), "");
  EXPECT_FALSE(complete);
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/model-3.safetensors"));
  // Downloads are held to the same limit.
  EXPECT_THAT(small->AppendModelBytes(4, 0, std::string(101, 'a')),
              testing::StatusIs(StatusCode::kFailedPrecondition, "exceed"));
}

TEST_F(ClientStateDirTest, SymbolicLinksAreNeitherReadNorWrittenThrough) {
  const std::string victim = dir_ + "-victim";
  { std::ofstream(victim) << "precious"; }
  std::filesystem::create_symlink(victim, dir_ + "/model-5.partial");
  // Reading: not followed, and the link is dropped.
  bool complete = true;
  EXPECT_EQ(state_->ModelBytes(5, &complete), "");
  EXPECT_FALSE(std::filesystem::is_symlink(dir_ + "/model-5.partial"));
  // Writing: a link planted at an append is refused, the file behind it unchanged.
  std::filesystem::create_symlink(victim, dir_ + "/model-5.partial");
  EXPECT_THAT(state_->AppendModelBytes(5, 8, "appended"), testing::StatusIs(StatusCode::kUnavailable, "symbolic link"));
  std::ifstream in(victim);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "precious");
  std::filesystem::remove(victim);
  // The id and an upload's files too.
  std::filesystem::create_symlink("/etc/hostname", dir_ + "/client-id");
  EXPECT_EQ(state_->ClientId(), "");
}

TEST_F(ClientStateDirTest, AResidualThatIsNotFiniteOrOutOfRangeIsDropped) {
  ModelState residual = *ModelState::Create({{"w", {3}}});
  residual.data()[1] = 0.25f;
  ASSERT_OK(state_->SaveResidual(residual));
  ASSERT_TRUE(Reopen()->LoadResidual().has_value());
  for (float bad : {std::nanf(""), 1e30f, -INFINITY}) {
    residual.data()[2] = bad;
    ASSERT_OK(state_->SaveResidual(residual));
    EXPECT_FALSE(Reopen()->LoadResidual().has_value()) << bad;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/residual.safetensors")) << bad;
  }
}

TEST_F(ClientStateDirTest, TheOptimizersMomentsSurviveARestartAndBrokenOnesAreDropped) {
  EXPECT_FALSE(state_->LoadOptimizerState().has_value());
  OptimizerState kept;
  kept.steps = 41;
  kept.first_moment = {0.5f, -0.25f, 0.0f};
  kept.second_moment = {0.25f, 0.0625f, 0.0f};
  ASSERT_OK(state_->SaveOptimizerState(kept));
  std::optional<OptimizerState> back = Reopen()->LoadOptimizerState();
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->steps, 41);
  EXPECT_EQ(back->first_moment, kept.first_moment);
  EXPECT_EQ(back->second_moment, kept.second_moment);
  // A NaN first moment or a negative second moment would poison every later step.
  for (auto [which, bad] : {std::pair{0, std::nanf("")}, std::pair{1, -1.0f}, std::pair{1, INFINITY}}) {
    OptimizerState broken = kept;
    (which == 0 ? broken.first_moment : broken.second_moment)[1] = bad;
    ASSERT_OK(state_->SaveOptimizerState(broken));
    EXPECT_FALSE(Reopen()->LoadOptimizerState().has_value()) << which << " " << bad;
    EXPECT_FALSE(std::filesystem::exists(dir_ + "/optimizer.safetensors"));
  }
  // Something else under its name: dropped too.
  ASSERT_OK(state_->SaveResidual(*ModelState::Create({{"w", {3}}})));
  std::filesystem::rename(dir_ + "/residual.safetensors", dir_ + "/optimizer.safetensors");
  EXPECT_FALSE(Reopen()->LoadOptimizerState().has_value());
}

}  // namespace
}  // namespace plexus
