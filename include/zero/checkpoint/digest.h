// CRC32C (Castagnoli) checksums of checkpoint files: the digest the writer computes while it
// writes and the one a reader recomputes from disk, so a manifest can name both size and sum.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace zero::ckpt {

// A file's size and CRC32C; written into the manifest and checked on load.
struct FileDigest {
  int64_t bytes = 0;
  uint32_t crc32c = 0;
};
inline bool operator==(const FileDigest& a, const FileDigest& b) {
  return a.bytes == b.bytes && a.crc32c == b.crc32c;
}
inline bool operator!=(const FileDigest& a, const FileDigest& b) {
  return !(a == b);
}

// CRC32C of n bytes, continuing from `crc` (0 to start): crc32c(b, nb, crc32c(a, na)) equals
// the CRC of a followed by b. Uses SSE4.2's crc32 instruction when the CPU has it.
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);

// Streams the file from disk (1 MiB reads); CheckpointError if it cannot be opened or read.
FileDigest digest_file(const std::string& path);

namespace detail {
// The two implementations behind crc32c(), exposed so that tests compare them.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc);  // slicing-by-8
bool crc32c_hw_available();
uint32_t crc32c_hw(const void* data, size_t n, uint32_t crc);  // only if crc32c_hw_available()
}  // namespace detail

}  // namespace zero::ckpt
