#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <nmmintrin.h>
#elif defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#endif

namespace plexus {
namespace {

constexpr uint32_t kPolynomial = 0x82f63b78;  // 0x1EDC6F41 reflected

// Slicing by 8: table[k][b] is the CRC of byte b followed by k zero bytes.
constexpr std::array<std::array<uint32_t, 256>, 8> MakeTables() {
  std::array<std::array<uint32_t, 256>, 8> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c >> 1) ^ ((c & 1) ? kPolynomial : 0);
    t[0][b] = c;
  }
  for (uint32_t b = 0; b < 256; ++b) {
    for (size_t k = 1; k < 8; ++k) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xff];
  }
  return t;
}
constexpr std::array<std::array<uint32_t, 256>, 8> kTables = MakeTables();

uint64_t LoadLittleEndian64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
  v = __builtin_bswap64(v);
#endif
  return v;
}

// On the inverted register (the caller inverts before and after).
uint32_t TableCrc(uint32_t c, const unsigned char* p, size_t n) {
  for (; n >= 8; n -= 8, p += 8) {
    const uint64_t v = LoadLittleEndian64(p) ^ c;
    c = kTables[7][v & 0xff] ^ kTables[6][(v >> 8) & 0xff] ^ kTables[5][(v >> 16) & 0xff] ^
        kTables[4][(v >> 24) & 0xff] ^ kTables[3][(v >> 32) & 0xff] ^ kTables[2][(v >> 40) & 0xff] ^
        kTables[1][(v >> 48) & 0xff] ^ kTables[0][v >> 56];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xff];
  return c;
}

// A linear map of the 32-bit register as four byte tables: Apply(c) = sum of t[k][byte k of c].
struct RegisterMap {
  uint32_t t[4][256];
  uint32_t Apply(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

// GF(2) 32x32 matrices as the images of the 32 unit vectors.
using Matrix = std::array<uint32_t, 32>;
uint32_t Times(const Matrix& m, uint32_t v) {
  uint32_t s = 0;
  for (int i = 0; v != 0; ++i, v >>= 1) {
    if (v & 1) s ^= m[i];
  }
  return s;
}
Matrix Compose(const Matrix& a, const Matrix& b) {
  Matrix r;
  for (int i = 0; i < 32; ++i) r[i] = Times(a, b[i]);
  return r;
}

// The map "append `bytes` zero bytes" (by squaring the one-byte map).
RegisterMap ZerosMap(size_t bytes) {
  Matrix one_byte;
  for (int i = 0; i < 32; ++i) {
    uint32_t v = uint32_t{1} << i;
    for (int bit = 0; bit < 8; ++bit) v = (v >> 1) ^ ((v & 1) ? kPolynomial : 0);
    one_byte[i] = v;
  }
  Matrix result{};
  for (int i = 0; i < 32; ++i) result[i] = uint32_t{1} << i;
  for (Matrix power = one_byte; bytes != 0; bytes >>= 1, power = Compose(power, power)) {
    if (bytes & 1) result = Compose(power, result);
  }
  RegisterMap map;
  for (int k = 0; k < 4; ++k) {
    for (uint32_t b = 0; b < 256; ++b) map.t[k][b] = Times(result, b << (8 * k));
  }
  return map;
}

// Joining: the register after block A then B is Shift(register after A, |B|) ^ (register of B
// from zero), Shift being the linear map "append |B| zero bytes", applied by four byte tables:
// the hardware path joins its three streams so, and Crc32cCombine joins two CRCs.
constexpr size_t kLongBlock = 8192;  // bytes per stream of the hardware path
constexpr size_t kShortBlock = 256;

// Made on first use (microseconds), so that processes that never check a CRC pay nothing.
const RegisterMap& ShiftLong() {
  static const RegisterMap map = ZerosMap(kLongBlock);
  return map;
}
const RegisterMap& ShiftShort() {
  static const RegisterMap map = ZerosMap(kShortBlock);
  return map;
}

#if defined(__x86_64__) || (defined(__aarch64__) && defined(__ARM_FEATURE_CRC32))
// The CRC instruction takes a few cycles to give its result but can start one every cycle, so
// the hardware path runs three streams over three adjacent blocks at once and joins them.

#if defined(__x86_64__)
#define PLEXUS_CRC_TARGET __attribute__((target("sse4.2")))
PLEXUS_CRC_TARGET inline uint64_t Step8(uint64_t c, const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return _mm_crc32_u64(c, v);
}
PLEXUS_CRC_TARGET inline uint32_t Step1(uint32_t c, unsigned char b) { return _mm_crc32_u8(c, b); }
const bool kHardware = __builtin_cpu_supports("sse4.2");
#else
#define PLEXUS_CRC_TARGET
inline uint64_t Step8(uint64_t c, const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return __crc32cd(static_cast<uint32_t>(c), v);
}
inline uint32_t Step1(uint32_t c, unsigned char b) { return __crc32cb(c, b); }
constexpr bool kHardware = true;
#endif

// Three streams of `block` bytes each, joined.
PLEXUS_CRC_TARGET inline uint32_t ThreeBlocks(uint32_t c, const unsigned char* p, size_t block,
                                              const RegisterMap& shift) {
  uint64_t a = c, b = 0, d = 0;
  for (const unsigned char* end = p + block; p < end; p += 8) {
    a = Step8(a, p);
    b = Step8(b, p + block);
    d = Step8(d, p + 2 * block);
  }
  return shift.Apply(shift.Apply(static_cast<uint32_t>(a)) ^ static_cast<uint32_t>(b)) ^ static_cast<uint32_t>(d);
}

PLEXUS_CRC_TARGET uint32_t HardwareCrc(uint32_t c, const unsigned char* p, size_t n) {
  if (n >= 3 * kLongBlock) {
    const RegisterMap& shift = ShiftLong();
    for (; n >= 3 * kLongBlock; n -= 3 * kLongBlock, p += 3 * kLongBlock) c = ThreeBlocks(c, p, kLongBlock, shift);
  }
  if (n >= 3 * kShortBlock) {
    const RegisterMap& shift = ShiftShort();
    for (; n >= 3 * kShortBlock; n -= 3 * kShortBlock, p += 3 * kShortBlock) c = ThreeBlocks(c, p, kShortBlock, shift);
  }
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) c64 = Step8(c64, p);
  c = static_cast<uint32_t>(c64);
  for (; n > 0; --n, ++p) c = Step1(c, *p);
  return c;
}
#else
uint32_t HardwareCrc(uint32_t c, const unsigned char* p, size_t n) { return TableCrc(c, p, n); }
constexpr bool kHardware = false;
#endif

}  // namespace

uint32_t ExtendCrc32cPortable(uint32_t init, std::string_view bytes) {
  return ~TableCrc(~init, reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size());
}

uint32_t ExtendCrc32c(uint32_t init, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  return ~(kHardware ? HardwareCrc(~init, p, bytes.size()) : TableCrc(~init, p, bytes.size()));
}

bool Crc32cUsesHardware() { return kHardware; }

uint32_t Crc32cCombine(uint32_t crc_a, uint32_t crc_b, size_t length_b) {
  // crc(a + b) = Shift(crc(a), |b|) ^ crc(b) (the inversions before and after cancel): |b| zero
  // bytes appended 8 KiB and 256 bytes at a time with the hardware path's maps, then byte by byte.
  uint32_t c = crc_a;
  if (length_b >= kLongBlock) {
    const RegisterMap& shift = ShiftLong();
    for (; length_b >= kLongBlock; length_b -= kLongBlock) c = shift.Apply(c);
  }
  if (length_b >= kShortBlock) {
    const RegisterMap& shift = ShiftShort();
    for (; length_b >= kShortBlock; length_b -= kShortBlock) c = shift.Apply(c);
  }
  for (; length_b > 0; --length_b) c = (c >> 8) ^ kTables[0][c & 0xff];
  return c ^ crc_b;
}

}  // namespace plexus
