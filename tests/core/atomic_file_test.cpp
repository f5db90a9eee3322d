#include "core/atomic_file.h"

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "core/large_blocks.h"
#include "tests/testing/scratch_dir_test_base.h"
#include "tests/testing/status_matchers.h"

namespace plexus {
namespace {

using ::plexus::testing::StatusIs;
using AtomicFileTest = ::plexus::testing::ScratchDirTest;  // dir_: the test's own directory

std::string Contents(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

TEST_F(AtomicFileTest, WritesThePiecesInOrderAndReplacesTheOldFile) {
  const std::string path = (dir_ / "f.bin").string();
  ASSERT_OK(WriteFileAtomically(path, {"old"}));
  ASSERT_OK(WriteFileAtomically(path, {"head:", std::string_view("\0body", 5), "", ":tail"}));
  EXPECT_EQ(Contents(path), std::string("head:\0body:tail", 15));
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir_), std::filesystem::directory_iterator()), 1);
  EXPECT_OK(SyncDirectory(dir_.string()));
}

TEST_F(AtomicFileTest, LargeFilesOfAnyLengthComeOutExact) {
  // Large writes take the direct path in whole blocks; the file must still end where the bytes do.
  std::string body((size_t{9} << 20) + 12345, '\0');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>(i * 2654435761u >> 24);
  const std::string path = (dir_ / "big.bin").string();
  ASSERT_OK(WriteFileAtomically(path, {"prefix-of-odd-length", body}));
  EXPECT_EQ(Contents(path), "prefix-of-odd-length" + body);
  ASSERT_OK(WriteFileAtomically(path, {std::string_view(body).substr(0, (size_t{1} << 20) + 1)}));
  EXPECT_EQ(Contents(path), body.substr(0, (size_t{1} << 20) + 1));
  // Written over in place: longer, as long, shorter than the file that is there.
  const std::string in_place = (dir_ / "in_place.bin").string();
  for (size_t size : {body.size() - 7, body.size() - 7, body.size(), (size_t{1} << 20) + 4096, size_t{1} << 20}) {
    ASSERT_OK(WriteFileInPlaceSynced(in_place, {std::string_view(body).substr(0, size)}));
    EXPECT_EQ(Contents(in_place), body.substr(0, size)) << size;
  }
}

// A piece at an aligned file offset and memory address goes to the disk from where it is, in
// whole blocks; only its last partial block and the pieces before it are copied. One byte less
// before it, and all of it is copied. Either way the file holds exactly the bytes.
TEST_F(AtomicFileTest, AlignedPiecesAreWrittenFromTheCallersMemory) {
  const size_t body_bytes = (size_t{1} << 20) + 100;
  std::unique_ptr<char, void (*)(char*)> body(static_cast<char*>(AllocateLargeBlock(body_bytes)),
                                              [](char* p) { FreeLargeBlock(p, body_bytes); });
  for (size_t i = 0; i < body_bytes; ++i) body.get()[i] = static_cast<char>(i * 2654435761u >> 24);
  const std::string_view values(body.get(), body_bytes);
  const std::string path = (dir_ / "aligned.bin").string();
  const std::string header(kDirectWriteAlignment, 'h');

  const DirectWriteBytes before = DirectWriteBytesSoFar();
  ASSERT_OK(WriteFileAtomically(path, {header, values}));
  const DirectWriteBytes after = DirectWriteBytesSoFar();
  EXPECT_EQ(Contents(path), header + std::string(values));
  if (after.from_caller == before.from_caller && after.copied == before.copied) {
    GTEST_SKIP() << "the file system under " << dir_ << " is written buffered (in memory, or O_DIRECT refused)";
  }
  const size_t whole = body_bytes / kDirectWriteAlignment * kDirectWriteAlignment;
  EXPECT_EQ(after.from_caller - before.from_caller, whole);
  EXPECT_EQ(after.copied - before.copied, kDirectWriteAlignment + body_bytes - whole);  // the header, the tail

  const std::string_view shorter(header.data(), header.size() - 1);
  ASSERT_OK(WriteFileAtomically(path, {shorter, values}));
  const DirectWriteBytes misaligned = DirectWriteBytesSoFar();
  EXPECT_EQ(Contents(path), std::string(shorter) + std::string(values));
  EXPECT_EQ(misaligned.from_caller, after.from_caller);
  EXPECT_EQ(misaligned.copied - after.copied, shorter.size() + body_bytes);
}

TEST_F(AtomicFileTest, AFolderThatIsNotThereIsAnErrorAndLeavesNothing) {
  const std::string path = "/nonexistent-plexus-folder/f.bin";
  EXPECT_THAT(WriteFileAtomically(path, {"x"}), StatusIs(StatusCode::kInvalidArgument, "cannot write"));
  EXPECT_THAT(SyncDirectory("/nonexistent-plexus-folder"), StatusIs(StatusCode::kUnavailable, "cannot open directory"));
}

}  // namespace
}  // namespace plexus
