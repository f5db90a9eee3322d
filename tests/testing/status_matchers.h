// Test helpers for Status and Result<T>.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/status.h"

namespace plexus::testing {

inline const Status& GetStatus(const Status& s) { return s; }
template <typename T>
Status GetStatus(const Result<T>& r) { return r.status(); }

#define EXPECT_OK(expr) EXPECT_TRUE(::plexus::testing::GetStatus(expr).ok()) << ::plexus::testing::GetStatus(expr).ToString()
#define ASSERT_OK(expr) ASSERT_TRUE(::plexus::testing::GetStatus(expr).ok()) << ::plexus::testing::GetStatus(expr).ToString()

// Matches a Status or Result whose code is `code` and whose message contains `substring`.
MATCHER_P2(StatusIs, code, substring, "") {
  const Status s = ::plexus::testing::GetStatus(arg);
  *result_listener << "status is " << s.ToString();
  return s.code() == code && s.message().find(substring) != std::string::npos;
}

}  // namespace plexus::testing
