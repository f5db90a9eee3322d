// Test helpers for Status and Result<T>.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"

namespace plexus::testing {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
Status GetStatus(const Result<T>& r) {
  return r.status();
}

// EXPECT_OK(expr) / ASSERT_OK(expr): `expr` (a Status or a Result<T>) must be OK. The expression is
// evaluated exactly once, so a failing Submit or Upload is neither repeated nor described by a
// second call. The status is copied before the temporary holding it goes away.
#define PLEXUS_TEST_OK_IMPL_(expr, on_failure)                                                                   \
  GTEST_AMBIGUOUS_ELSE_BLOCKER_                                                                                  \
  if (const ::plexus::Status plexus_test_status_ = ::plexus::testing::GetStatus(expr); plexus_test_status_.ok()) \
    ;                                                                                                            \
  else                                                                                                           \
    on_failure << "Value of: " #expr "\n  Actual: " << plexus_test_status_.ToString() << "\nExpected: OK\n"
#define EXPECT_OK(expr) PLEXUS_TEST_OK_IMPL_(expr, ADD_FAILURE())
#define ASSERT_OK(expr) PLEXUS_TEST_OK_IMPL_(expr, GTEST_FAIL())

// ASSERT_OK_AND_ASSIGN(lhs, expr): `expr` (a Result<T>) must be OK; its value is then moved into
// `lhs` (a declaration, `Dataset d`, or an existing variable). `expr` is evaluated exactly once.
#define PLEXUS_TEST_CONCAT_INNER_(a, b) a##b
#define PLEXUS_TEST_CONCAT_(a, b) PLEXUS_TEST_CONCAT_INNER_(a, b)
#define PLEXUS_TEST_ASSIGN_IMPL_(result, lhs, expr) \
  auto result = (expr);                             \
  ASSERT_OK(result);                                \
  lhs = *std::move(result)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  PLEXUS_TEST_ASSIGN_IMPL_(PLEXUS_TEST_CONCAT_(plexus_test_result_, __LINE__), lhs, expr)

// Matches a Status or Result whose code is `code` and whose message contains `substring`.
MATCHER_P2(StatusIs, code, substring, "") {
  const Status s = ::plexus::testing::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code && s.message().find(substring) != std::string::npos;
}

}  // namespace plexus::testing
