#include "core/file_contents.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

TEST(FileContentsTest, ReadsEveryByteOfAFileLargerThanOneRead) {
  const std::string path = ::testing::TempDir() + "/file_contents_test.bin";
  std::string bytes(200000, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 7 + i / 256);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  Result<std::string> read = ReadFileContents(path);
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_EQ(*read, bytes);
  std::ofstream(path, std::ios::binary | std::ios::trunc).flush();
  EXPECT_EQ(ReadFileContents(path).value(), "");
  std::filesystem::remove(path);
}

TEST(FileContentsTest, MissingFilesAndDirectoriesAreNotFoundNamingThePath) {
  EXPECT_THAT(ReadFileContents("/nonexistent/plexus/file").status(),
              StatusIs(StatusCode::kNotFound, "cannot open '/nonexistent/plexus/file'"));
  EXPECT_THAT(ReadFileContents(::testing::TempDir()).status(), StatusIs(StatusCode::kNotFound, "a directory"));
}

TEST(FileContentsTest, ReadsFilesThatReportNoSize) {
  Result<std::string> read = ReadFileContents("/proc/self/status");  // st_size 0, yet content
  ASSERT_TRUE(read.ok()) << read.status().ToString();
  EXPECT_THAT(*read, ::testing::HasSubstr("Name:"));
}

}  // namespace
}  // namespace plexus
