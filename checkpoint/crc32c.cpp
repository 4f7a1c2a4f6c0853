// CRC32C (Castagnoli, reflected polynomial 0x82F63B78): a portable slicing-by-8 version, the
// SSE4.2 crc32 instruction chosen at run time when present, and digest_file() over either.
#include <array>
#include <cstring>
#include <vector>

#include <zero/checkpoint/digest.h>

#include "posix_io.h"

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
#define ZERO_CKPT_X86 1
#endif

namespace zero::ckpt {
namespace {

using Tables = std::array<std::array<uint32_t, 256>, 8>;

constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ ((c & 1u) ? 0x82F63B78u : 0u);
    t[0][i] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (size_t i = 0; i < 256; ++i) t[k][i] = (t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xFFu];
  return t;
}
constexpr Tables kTables = make_tables();

}  // namespace

namespace detail {

uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= c;
    c = kTables[7][w & 0xFF] ^ kTables[6][(w >> 8) & 0xFF] ^ kTables[5][(w >> 16) & 0xFF] ^
        kTables[4][(w >> 24) & 0xFF] ^ kTables[3][(w >> 32) & 0xFF] ^ kTables[2][(w >> 40) & 0xFF] ^
        kTables[1][(w >> 48) & 0xFF] ^ kTables[0][w >> 56];
  }
#endif
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xFFu];
  return ~c;
}

#ifdef ZERO_CKPT_X86
bool crc32c_hw_available() {
  return __builtin_cpu_supports("sse4.2");
}

__attribute__((target("sse4.2"))) uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#ifdef __x86_64__
  uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = static_cast<uint32_t>(c64);
#endif
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return ~c;
}
#else
bool crc32c_hw_available() {
  return false;
}
uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc) {
  return crc32c_portable(data, n, crc);
}
#endif

}  // namespace detail

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const bool hw = detail::crc32c_hw_available();
  return hw ? detail::crc32c_hw(data, n, crc) : detail::crc32c_portable(data, n, crc);
}

FileDigest digest_file(const std::string& path) {
  int64_t size = 0;
  detail::Fd fd = detail::open_regular_file(path, &size);
  std::vector<unsigned char> buf(size_t{1} << 20);
  FileDigest d;
  for (;;) {
    size_t got = detail::read_some(fd.get(), buf.data(), buf.size(), path, d.bytes);
    if (got == 0) break;
    d.crc32c = crc32c(buf.data(), got, d.crc32c);
    d.bytes += static_cast<int64_t>(got);
  }
  return d;
}

}  // namespace zero::ckpt
