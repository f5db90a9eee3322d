#include "core/status.h"

#include "tests/testing/status_matchers.h"

#include <gtest/gtest-spi.h>

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

Result<int> Half(int x) {
  if (x % 2) return InvalidArgumentError(std::to_string(x) + " is odd");
  return x / 2;
}

Result<int> Quarter(int x) {
  PLEXUS_ASSIGN_OR_RETURN(int h, Half(x));
  PLEXUS_ASSIGN_OR_RETURN(int q, Half(h));
  return q;
}

TEST(StatusTest, OkHasNoMessage) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.ToString(), "OK");
}

TEST(StatusTest, ContextKeepsCodeAndCause) {
  Status s = NotFoundError("no task 7").WithContext("upload from client 3");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.ToString(), "NOT_FOUND: upload from client 3: no task 7");
}

TEST(StatusTest, MacrosPropagateTheFirstError) {
  EXPECT_EQ(*Quarter(8), 2);
  EXPECT_THAT(Quarter(6), StatusIs(StatusCode::kInvalidArgument, "3 is odd"));
}

// EXPECT_OK and ASSERT_OK evaluate their argument once, also when it fails, and report that value.
int calls_of_failing_call = 0;
Status FailingCall() {
  ++calls_of_failing_call;
  return InternalError("call " + std::to_string(calls_of_failing_call));
}
Result<int> FailingResult() {
  ++calls_of_failing_call;
  return NotFoundError("result " + std::to_string(calls_of_failing_call));
}
void AssertOkOnFailingCall() { ASSERT_OK(FailingCall()); }

TEST(StatusMatchersTest, OkMacrosEvaluateTheirArgumentOnce) {
  calls_of_failing_call = 0;
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(FailingCall()), "INTERNAL: call 1");
  EXPECT_EQ(calls_of_failing_call, 1);
  calls_of_failing_call = 0;
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(FailingResult()), "NOT_FOUND: result 1");
  EXPECT_EQ(calls_of_failing_call, 1);
  calls_of_failing_call = 0;
  EXPECT_FATAL_FAILURE(AssertOkOnFailingCall(), "INTERNAL: call 1");
  EXPECT_EQ(calls_of_failing_call, 1);
  int ok_calls = 0;
  EXPECT_OK([&] {
    ++ok_calls;
    return Status();
  }());
  EXPECT_EQ(ok_calls, 1);
}

}  // namespace
}  // namespace plexus
