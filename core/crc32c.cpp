#include "core/crc32c.h"

#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
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

#if defined(__x86_64__)
// Folding by carry-less multiplication (Gopal et al., "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ", Intel 2009), 256 bytes per step in four 512-bit registers: the
// CRC instruction above gives 8 bytes a cycle at best, while VPCLMULQDQ folds 64 bytes with two
// multiplications. The message is a polynomial whose first bit is its highest term; a 128-bit
// lane H = A x^64 + B (A its first eight bytes) that lies F bits before a later lane contributes
// H x^F, which equals A (x^(F+64) mod P) + B (x^F mod P) modulo P: two 64 x 32-bit products that
// fit in the later lane, so the lane folds into it with the same CRC. What is left at the end is
// one lane, whose CRC the CRC instruction takes (16 bytes), and the tail continues from there.
#define PLEXUS_FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,sse4.2")))
constexpr size_t kFoldBlock = 256;

// x^e mod P as VPCLMULQDQ's operand: bit-reflected in 64 bits (the term x^d at bit 63 - d), and
// one power lower because the product of two reflected operands comes out one place shifted.
constexpr uint64_t FoldMultiplier(size_t bits_ahead) {
  constexpr uint64_t kNormal = 0x1edc6f41;  // P without its x^32 term
  uint64_t r = 1;
  for (size_t i = 0; i + 1 < bits_ahead; ++i) r = (r << 1) ^ ((r >> 31 & 1) ? kNormal : 0), r &= 0xffffffff;
  uint64_t reflected = 0;
  for (int d = 0; d < 32; ++d) reflected |= ((r >> d) & 1) << (63 - d);
  return reflected;
}
// The multipliers of a lane's two halves for a fold over `bytes` (A by x^(F+64), B by x^F), as
// the lane's low and high 64 bits.
constexpr uint64_t FoldA(size_t bytes) { return FoldMultiplier(8 * bytes + 64); }
constexpr uint64_t FoldB(size_t bytes) { return FoldMultiplier(8 * bytes); }
// Four lanes' multipliers for folds over the given byte counts, lane 0 first, computed at compile
// time. (GCC 12's broadcast, insert and extract intrinsics pass an uninitialized register that
// -Wmaybe-uninitialized reports; these forms do not.)
template <size_t kLane0, size_t kLane1, size_t kLane2, size_t kLane3>
PLEXUS_FOLD_TARGET inline __m512i Multipliers() {
  constexpr uint64_t q[8] = {FoldA(kLane0), FoldB(kLane0), FoldA(kLane1), FoldB(kLane1),
                             FoldA(kLane2), FoldB(kLane2), FoldA(kLane3), FoldB(kLane3)};
  return _mm512_set_epi64(static_cast<long long>(q[7]), static_cast<long long>(q[6]), static_cast<long long>(q[5]),
                          static_cast<long long>(q[4]), static_cast<long long>(q[3]), static_cast<long long>(q[2]),
                          static_cast<long long>(q[1]), static_cast<long long>(q[0]));
}
PLEXUS_FOLD_TARGET inline __m128i Lane(__m512i v, int i) {
  switch (i) {
    case 0:
      return _mm512_mask_extracti32x4_epi32(_mm_setzero_si128(), 0xf, v, 0);
    case 1:
      return _mm512_mask_extracti32x4_epi32(_mm_setzero_si128(), 0xf, v, 1);
    case 2:
      return _mm512_mask_extracti32x4_epi32(_mm_setzero_si128(), 0xf, v, 2);
    default:
      return _mm512_mask_extracti32x4_epi32(_mm_setzero_si128(), 0xf, v, 3);
  }
}
PLEXUS_FOLD_TARGET inline __m512i Fold(__m512i lanes, __m512i by, __m512i onto) {
  return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(lanes, by, 0x00), _mm512_clmulepi64_epi128(lanes, by, 0x11),
                                   onto, 0x96);  // the exclusive or of all three
}

PLEXUS_FOLD_TARGET uint32_t FoldingCrc(uint32_t c, const unsigned char* p, size_t n) {
  if (n < 2 * kFoldBlock) return HardwareCrc(c, p, n);
  const __m512i by_block = Multipliers<kFoldBlock, kFoldBlock, kFoldBlock, kFoldBlock>();
  const __m512i by_register = Multipliers<64, 64, 64, 64>();
  // The register enters as the first four bytes of the message, added to them (the CRC is linear).
  __m512i a0 = _mm512_xor_si512(_mm512_loadu_si512(p), _mm512_set_epi64(0, 0, 0, 0, 0, 0, 0, c));
  __m512i a1 = _mm512_loadu_si512(p + 64), a2 = _mm512_loadu_si512(p + 128), a3 = _mm512_loadu_si512(p + 192);
  for (p += kFoldBlock, n -= kFoldBlock; n >= kFoldBlock; p += kFoldBlock, n -= kFoldBlock) {
    a0 = Fold(a0, by_block, _mm512_loadu_si512(p));
    a1 = Fold(a1, by_block, _mm512_loadu_si512(p + 64));
    a2 = Fold(a2, by_block, _mm512_loadu_si512(p + 128));
    a3 = Fold(a3, by_block, _mm512_loadu_si512(p + 192));
  }
  a3 = Fold(Fold(Fold(a0, by_register, a1), by_register, a2), by_register, a3);
  // Lanes 0, 1 and 2 of the last register fold onto lane 3, 48, 32 and 16 bytes ahead (lane 3's
  // multipliers zeroed: its product vanishes, and it is added as it is).
  const __m512i by_lane = _mm512_maskz_mov_epi64(0x3f, Multipliers<48, 32, 16, 0>());
  const __m512i folded = Fold(a3, by_lane, _mm512_setzero_si512());
  const __m128i last =
      _mm_xor_si128(_mm_xor_si128(Lane(folded, 0), Lane(folded, 1)), _mm_xor_si128(Lane(folded, 2), Lane(a3, 3)));
  const uint64_t crc = _mm_crc32_u64(_mm_crc32_u64(0, static_cast<uint64_t>(_mm_cvtsi128_si64(last))),
                                     static_cast<uint64_t>(_mm_extract_epi64(last, 1)));
  return HardwareCrc(static_cast<uint32_t>(crc), p, n);
}
#undef PLEXUS_FOLD_TARGET
const bool kFolding = kHardware && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#else
uint32_t FoldingCrc(uint32_t c, const unsigned char* p, size_t n) { return HardwareCrc(c, p, n); }
constexpr bool kFolding = false;
#endif

}  // namespace

bool Crc32cRunsOnThisCpu(Crc32cPath path) {
  switch (path) {
    case Crc32cPath::kTable:
      return true;
    case Crc32cPath::kInstruction:
      return kHardware;
    case Crc32cPath::kFolding:
      return kFolding;
  }
  return false;
}

uint32_t ExtendCrc32c(Crc32cPath path, uint32_t init, std::string_view bytes) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (path == Crc32cPath::kFolding && kFolding) return ~FoldingCrc(~init, p, bytes.size());
  if (path != Crc32cPath::kTable && kHardware) return ~HardwareCrc(~init, p, bytes.size());
  return ~TableCrc(~init, p, bytes.size());
}

namespace {
const Crc32cPath kFastest = kFolding ? Crc32cPath::kFolding : kHardware ? Crc32cPath::kInstruction : Crc32cPath::kTable;
}  // namespace

uint32_t ExtendCrc32c(uint32_t init, std::string_view bytes) { return ExtendCrc32c(kFastest, init, bytes); }

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
