#include "core/atomic_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST(AtomicFileTest, WritesThePiecesInOrderAndReplacesTheOldFile) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plexus_atomic_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "f.bin").string();
  ASSERT_OK(WriteFileAtomically(path, {"old"}));
  ASSERT_OK(WriteFileAtomically(path, {"head:", std::string_view("\0body", 5), "", ":tail"}));
  EXPECT_EQ(Contents(path), std::string("head:\0body:tail", 15));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()), 1);
  EXPECT_OK(SyncDirectory(dir.string()));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, LargeFilesOfAnyLengthComeOutExact) {
  // Large writes take the direct path in whole blocks; the file must still end where the bytes do.
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("plexus_atomic_big_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string body((size_t{9} << 20) + 12345, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 2654435761u >> 24);
  const std::string path = (dir / "big.bin").string();
  ASSERT_OK(WriteFileAtomically(path, {"prefix-of-odd-length", body}));
  EXPECT_EQ(Contents(path), "prefix-of-odd-length" + body);
  ASSERT_OK(WriteFileAtomically(path, {std::string_view(body).substr(0, (size_t{1} << 20) + 1)}));
  EXPECT_EQ(Contents(path), body.substr(0, (size_t{1} << 20) + 1));
  std::filesystem::remove_all(dir);
}

TEST(AtomicFileTest, AFolderThatIsNotThereIsAnErrorAndLeavesNothing) {
  const std::string path = "/nonexistent-plexus-folder/f.bin";
  EXPECT_THAT(WriteFileAtomically(path, {"x"}), StatusIs(StatusCode::kInvalidArgument, "cannot write"));
  EXPECT_THAT(SyncDirectory("/nonexistent-plexus-folder"), StatusIs(StatusCode::kUnavailable, "cannot open directory"));
}

}  // namespace
}  // namespace plexus
