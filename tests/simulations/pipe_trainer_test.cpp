#include "simulations/pipe_trainer.h"

#include "simulations/task_runner.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// A PipeTrainer between two pipes whose other ends the test holds, driven as the simulator drives
// it, by a LocalTaskRunner: a reply is written before Finish (it waits in the pipe's buffer, as do
// the small jobs here), so no second thread is needed.
class PipeTrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int jobs[2], replies[2];
    ASSERT_EQ(::pipe(jobs), 0);
    ASSERT_EQ(::pipe(replies), 0);
    jobs_in_ = jobs[0];
    replies_out_ = replies[1];
    trainer_ = std::make_unique<PipeTrainer>(replies[0], jobs[1]);
    runner_ = std::make_unique<LocalTaskRunner>(trainer_.get(), &train_);
    base_ = std::make_shared<const ModelState>(ModelState::Create({{"w", {2, 3}}, {"b", {3}}}, /*version=*/4).value());
  }
  void TearDown() override {
    runner_.reset();
    trainer_.reset();
    if (replies_out_ >= 0) ::close(replies_out_);
    ::close(jobs_in_);
  }

  void Reply(const std::string& line, const std::vector<float>& values = {}) {
    ASSERT_EQ(::write(replies_out_, line.data(), line.size()), static_cast<ssize_t>(line.size()));
    const size_t bytes = values.size() * sizeof(float);
    if (bytes > 0) {
      ASSERT_EQ(::write(replies_out_, values.data(), bytes), static_cast<ssize_t>(bytes));
    }
  }
  // The next line the runner wrote, and the bytes after it that the line announces.
  nlohmann::json ReadLine() {
    std::string line;
    char c = 0;
    while (::read(jobs_in_, &c, 1) == 1 && c != '\n') line.push_back(c);
    return nlohmann::json::parse(line, nullptr, false);
  }
  std::vector<char> ReadBytes(size_t n) {
    std::vector<char> bytes(n);
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::read(jobs_in_, bytes.data() + got, n - got);
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    bytes.resize(got);
    return bytes;
  }
  TrainJob Job() const {
    TrainJob job;
    job.base = base_;
    job.indices = {5, 7, 11};
    job.options.local_steps = 4;
    job.options.batch_size = 2;
    job.options.learning_rate = 0.1;
    job.options.seed = 77;
    job.options.task_id = "r1a0-c3";
    job.options.round = 1;
    return job;
  }

  int jobs_in_ = -1;
  int replies_out_ = -1;
  Dataset train_;  // the loop reads its own data: only the indices cross
  std::unique_ptr<PipeTrainer> trainer_;
  std::unique_ptr<LocalTaskRunner> runner_;
  std::shared_ptr<const ModelState> base_;
};

TEST_F(PipeTrainerTest, TheLayoutJobAndOutcomeCrossWhole) {
  ASSERT_TRUE(trainer_->SendLayout(*base_, 60000).ok());
  const nlohmann::json hello = ReadLine();
  ASSERT_TRUE(hello.is_object());
  EXPECT_EQ(hello["train_examples"], 60000);
  EXPECT_EQ(hello["layout"][0]["name"], "w");
  EXPECT_EQ(hello["layout"][0]["shape"], nlohmann::json::array({2, 3}));
  EXPECT_EQ(hello["layout"][1]["name"], "b");

  ASSERT_TRUE(runner_->Start(9, Job()).ok());
  const std::vector<float> trained{1, 2, 3, 4, 5, 6, 7, 8, 9};
  Reply("{\"examples\": 3, \"loss\": 0.5, \"floats\": 9}\n", trained);
  Result<TrainOutcome> out = runner_->Finish(9);
  ASSERT_TRUE(out.ok()) << out.status().ToString();
  EXPECT_EQ(std::vector<float>(out->weights.data().begin(), out->weights.data().end()), trained);
  EXPECT_EQ(out->weights.version(), 4u);
  EXPECT_EQ(out->num_examples, 3);
  EXPECT_EQ(out->steps, 4);
  EXPECT_DOUBLE_EQ(out->mean_loss, 0.5);

  const nlohmann::json job = ReadLine();
  ASSERT_TRUE(job.is_object());
  EXPECT_EQ(job["key"], 0);  // the jobs' sequence number
  EXPECT_EQ(job["task_id"], "r1a0-c3");
  EXPECT_EQ(job["seed"], 77);
  EXPECT_EQ(job["local_steps"], 4);
  EXPECT_EQ(job["indices"], 3);
  EXPECT_EQ(job["floats"], 9);
  const std::vector<char> indices = ReadBytes(3 * sizeof(uint32_t));
  ASSERT_EQ(indices.size(), 3 * sizeof(uint32_t));
  const auto* idx = reinterpret_cast<const uint32_t*>(indices.data());
  EXPECT_EQ(std::vector<uint32_t>(idx, idx + 3), (std::vector<uint32_t>{5, 7, 11}));
  EXPECT_EQ(ReadBytes(9 * sizeof(float)).size(), 9 * sizeof(float));  // the base model
  EXPECT_THAT(runner_->Finish(9).status(), StatusIs(StatusCode::kNotFound, "no training job"));
}

TEST_F(PipeTrainerTest, EveryBadReplyIsAnErrorThatSaysWhat) {
  struct Case {
    std::string line;
    std::vector<float> values;
    StatusCode code;
    std::string says;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases{
      {"not json\n", {}, StatusCode::kInvalidArgument, "not a JSON object"},
      {"{\"error\": \"ValueError: no\"}\n", {}, StatusCode::kAborted, "ValueError: no"},
      {"{\"examples\": 3}\n", {}, StatusCode::kInvalidArgument, "needs \"examples\" and \"floats\""},
      {"{\"examples\": -1, \"floats\": 9}\n", {}, StatusCode::kInvalidArgument, "needs"},
      {"{\"examples\": 3, \"floats\": 8}\n", {}, StatusCode::kInvalidArgument, "8 values where the model has 9"},
      {"{\"examples\": 3, \"floats\": 9}\n", {1, 2, 3, 4, nan, 6, 7, 8, 9}, StatusCode::kInvalidArgument, "tensor 'w'"},
      {"{\"examples\": 3, \"floats\": 9, \"loss\": 1e999}\n",
       {1, 2, 3, 4, 5, 6, 7, 8, 9},
       StatusCode::kInvalidArgument,
       "loss"},
  };
  uint64_t key = 0;
  for (const Case& c : cases) {
    ASSERT_TRUE(runner_->Start(++key, Job()).ok());
    Reply(c.line, c.values);
    const Status s = runner_->Finish(key).status();
    EXPECT_EQ(s.code(), c.code) << c.line << s.ToString();
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.line << s.ToString();
    ReadLine();  // the job the runner sent
    ReadBytes(3 * sizeof(uint32_t) + 9 * sizeof(float));
  }
}

TEST_F(PipeTrainerTest, AReplyCutShortOrNeverSentIsUnavailable) {
  ASSERT_TRUE(runner_->Start(1, Job()).ok());
  Reply("{\"examples\": 3, \"floats\": 9}\n", {1, 2, 3});  // 3 of the 9 values, then the end closes
  ::close(replies_out_);
  replies_out_ = -1;
  EXPECT_THAT(runner_->Finish(1).status(), StatusIs(StatusCode::kUnavailable, "closed its pipe"));
  ASSERT_TRUE(runner_->Start(2, Job()).ok());
  EXPECT_THAT(runner_->Finish(2).status(), StatusIs(StatusCode::kUnavailable, "closed its pipe"));
}

TEST_F(PipeTrainerTest, LabelFlippingJobsAreRefused) {
  TrainJob job = Job();
  job.flip_labels = true;
  ASSERT_TRUE(runner_->Start(1, std::move(job)).ok());
  EXPECT_THAT(runner_->Finish(1).status(), StatusIs(StatusCode::kInvalidArgument, "label-flipping"));
}

}  // namespace
}  // namespace plexus
