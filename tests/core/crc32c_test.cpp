// CRC-32C against the published check values (RFC 3720 B.4 and the catalogue's "123456789"),
// and the laws the framing rests on: extending equals hashing the concatenation, the hardware
// path equals the table path, any one flipped bit changes the value, and two CRCs join into the
// CRC of the two pieces.
#include "core/crc32c.h"

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include <string>

namespace plexus {
namespace {

TEST(Crc32c, MatchesThePublishedCheckValues) {
  EXPECT_EQ(Crc32c("123456789"), 0xe3069283u);
  EXPECT_EQ(Crc32c(std::string(32, '\0')), 0x8a9136aau);
  EXPECT_EQ(Crc32c(std::string(32, '\xff')), 0x62a8ab43u);
  std::string ascending, descending;
  for (int i = 0; i < 32; ++i) {
    ascending.push_back(static_cast<char>(i));
    descending.push_back(static_cast<char>(31 - i));
  }
  EXPECT_EQ(Crc32c(ascending), 0x46dd794eu);
  EXPECT_EQ(Crc32c(descending), 0x113fdb5cu);
  EXPECT_EQ(Crc32c(""), 0u);
  EXPECT_EQ(ExtendCrc32c(Crc32cPath::kTable, 0, "123456789"), 0xe3069283u);
  RecordProperty("instruction", Crc32cRunsOnThisCpu(Crc32cPath::kInstruction) ? "yes" : "no");
  RecordProperty("folding", Crc32cRunsOnThisCpu(Crc32cPath::kFolding) ? "yes" : "no");
}

RC_GTEST_PROP(Crc32cProperties, ExtendingEqualsTheCrcOfTheWholeOnEveryPath,
              (const std::string& a, const std::string& b)) {
  const uint32_t whole = Crc32c(a + b);
  RC_ASSERT(ExtendCrc32c(Crc32c(a), b) == whole);
  for (Crc32cPath path : {Crc32cPath::kTable, Crc32cPath::kInstruction, Crc32cPath::kFolding}) {
    RC_ASSERT(ExtendCrc32c(path, ExtendCrc32c(path, 0, a), b) == whole);
  }
}

// Each faster path against the table, at lengths around its edges and at every alignment: the
// instruction's three streams over blocks of 3 x 8192 and 3 x 256 bytes; folding's 256-byte
// steps from 512 bytes, and the tail the instruction takes after them.
class Crc32cPathTest : public testing::TestWithParam<Crc32cPath> {};

TEST_P(Crc32cPathTest, EveryLengthAroundTheBlockEdgesMatchesTheTablePath) {
  const Crc32cPath path = GetParam();
  if (!Crc32cRunsOnThisCpu(path)) GTEST_SKIP() << "this CPU does not run this path";
  std::string bytes(3 * 8192 * 2 + 3 * 256 + 40, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 2654435761u) >> 13);
  for (size_t length : {size_t{0}, size_t{7}, size_t{255}, size_t{256}, size_t{511}, size_t{512}, size_t{513},
                        size_t{767}, size_t{768}, size_t{769}, size_t{1023}, size_t{1024}, size_t{1279}, size_t{24575},
                        size_t{24576}, size_t{24577}, size_t{24576 + 768 + 9}, bytes.size() - 8}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      const std::string_view piece = std::string_view(bytes).substr(offset, length);
      EXPECT_EQ(ExtendCrc32c(path, 0, piece), ExtendCrc32c(Crc32cPath::kTable, 0, piece))
          << length << " bytes at " << offset;
      EXPECT_EQ(ExtendCrc32c(path, 0x12345678u, piece), ExtendCrc32c(Crc32cPath::kTable, 0x12345678u, piece)) << length;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Path, Crc32cPathTest, testing::Values(Crc32cPath::kInstruction, Crc32cPath::kFolding),
                         [](const testing::TestParamInfo<Crc32cPath>& info) {
                           return std::string(info.param == Crc32cPath::kFolding ? "Folding" : "Instruction");
                         });

RC_GTEST_PROP(Crc32cProperties, AnyFlippedBitChangesIt, (const std::string& bytes)) {
  RC_PRE(!bytes.empty());
  const size_t at = *rc::gen::inRange<size_t>(0, bytes.size());
  const int bit = *rc::gen::inRange(0, 8);
  std::string flipped = bytes;
  flipped[at] = static_cast<char>(flipped[at] ^ (1 << bit));
  RC_ASSERT(Crc32c(flipped) != Crc32c(bytes));
}

// Joining two CRCs by the second piece's length gives the CRC of the two pieces together, for
// any pieces (empty ones too), short and long, across the 8 KiB and 256-byte steps it joins by.
RC_GTEST_PROP(Crc32cProperties, CombiningTwoCrcsEqualsTheCrcOfTheConcatenation,
              (const std::string& a, const std::string& b)) {
  RC_ASSERT(Crc32cCombine(Crc32c(a), Crc32c(b), b.size()) == Crc32c(a + b));
}

TEST(Crc32c, CombinesAModelSizedPieceWithManyHeaders) {
  std::string chunk(256 << 10, '\0');
  for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = static_cast<char>((i * 131) >> 3);
  const uint32_t chunk_crc = Crc32c(chunk);
  for (int link = 0; link < 12; ++link) {  // twelve lengths, each off the 8 KiB steps
    const std::string header = "link " + std::to_string(link) + std::string(static_cast<size_t>(link), 'h');
    const std::string piece = chunk.substr(0, chunk.size() - static_cast<size_t>(link % 10));
    EXPECT_EQ(Crc32cCombine(Crc32c(header), Crc32c(piece), piece.size()), Crc32c(header + piece)) << link;
    EXPECT_EQ(Crc32cCombine(Crc32c(header), chunk_crc, chunk.size()), Crc32c(header + chunk)) << link;
  }
}

}  // namespace
}  // namespace plexus
