#include "core/host_port.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

// "host|port" for a parsed address, the error's message otherwise.
std::string Parsed(std::string_view text) {
  Result<HostPort> r = ParseHostPort(text);
  return r.ok() ? r->host + "|" + std::to_string(r->port) : r.status().message();
}

TEST(HostPortTest, NamesAddressesAndBracketedIpv6) {
  EXPECT_EQ(Parsed("localhost:50051"), "localhost|50051");
  EXPECT_EQ(Parsed("10.0.0.7:0"), "10.0.0.7|0");
  EXPECT_EQ(Parsed("[::1]:65535"), "::1|65535");
  EXPECT_EQ(Parsed("[fe80::1%eth0]:80"), "fe80::1%eth0|80");
  EXPECT_EQ(Parsed("::1:50051"), "::1|50051");  // unbracketed: the last colon is the port's
  EXPECT_EQ(Parsed(":50051"), "|50051");        // every address, where listening
}

TEST(HostPortTest, RefusesWhatIsNotHostColonPort) {
  EXPECT_THAT(ParseHostPort("localhost").status(),
              StatusIs(StatusCode::kInvalidArgument, "'localhost' is not HOST:PORT (no colon before the port)"));
  EXPECT_THAT(ParseHostPort("h:").status(), StatusIs(StatusCode::kInvalidArgument, "the port is not a number"));
  EXPECT_THAT(ParseHostPort("h:+80").status(), StatusIs(StatusCode::kInvalidArgument, "the port is not a number"));
  EXPECT_THAT(ParseHostPort("h:123456").status(), StatusIs(StatusCode::kInvalidArgument, "the port is not a number"));
  EXPECT_THAT(ParseHostPort("h:65536").status(), StatusIs(StatusCode::kInvalidArgument, "above 65535"));
  EXPECT_THAT(ParseHostPort("[::1:80").status(), StatusIs(StatusCode::kInvalidArgument, "bracket around the host"));
  EXPECT_THAT(ParseHostPort("[:80").status(), StatusIs(StatusCode::kInvalidArgument, "bracket around the host"));
  EXPECT_THAT(ParseHostPort("a]b:80").status(), StatusIs(StatusCode::kInvalidArgument, "a bracket inside the host"));
}

TEST(HostPortTest, LoopbackHosts) {
  EXPECT_TRUE(IsLoopbackHost("localhost"));
  EXPECT_TRUE(IsLoopbackHost("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackHost("127.9.9.9"));
  EXPECT_TRUE(IsLoopbackHost("::1"));
  EXPECT_FALSE(IsLoopbackHost("10.0.0.1"));
  EXPECT_FALSE(IsLoopbackHost("127example.com"));
  EXPECT_FALSE(IsLoopbackHost(""));
}

}  // namespace
}  // namespace plexus
