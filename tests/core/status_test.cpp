#include "core/status.h"

#include "tests/testing/status_matchers.h"

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

}  // namespace
}  // namespace plexus
