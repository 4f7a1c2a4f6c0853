// The disk's own limit for checkpoint_bench: sequential write(2)+fsync and pread of whole files in
// large chunks, with no engine, no format and no checksum. Each call is one rank's part.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace zero::bench {

// The memory the raw I/O moves through: a page-aligned ring of `ring_bytes` (a multiple of
// `chunk_bytes`) handed out one chunk at a time, so that the data comes from (or goes to) DRAM as
// a checkpoint's does and not from a chunk that stays in the CPU's caches. Filled with random
// non-zero floats so that no layer below (a compressing or deduplicating virtual disk) sees zeros.
class ChunkRing {
 public:
  ChunkRing(size_t ring_bytes, size_t chunk_bytes);
  ~ChunkRing();
  ChunkRing(const ChunkRing&) = delete;
  ChunkRing& operator=(const ChunkRing&) = delete;
  char* next();  // the next chunk, wrapping around
  size_t chunk_bytes() const { return chunk_bytes_; }
  size_t ring_bytes() const { return ring_bytes_; }

 private:
  char* data_ = nullptr;
  size_t ring_bytes_ = 0, chunk_bytes_ = 0, at_ = 0;
};

// Phases of one raw write, in seconds.
struct WriteTimes {
  double write_s = 0;  // write(2) calls: the copy into the page cache (and any throttling)
  double fsync_s = 0;  // fsync: waiting for the disk
};

// Creates `path` (O_EXCL) and writes `file_bytes` bytes from `ring` in chunk-sized write(2)
// calls, then fsyncs and closes it. With `writeback_every_bytes` > 0, starts the disk's
// write-back of each such range as soon as it is written (sync_file_range), so that the disk
// works while the next range is copied. Throws CheckpointError with the path on failure.
WriteTimes raw_write_file(const std::string& path, int64_t file_bytes, ChunkRing& ring,
                          int64_t writeback_every_bytes = 0);

// Reads the whole file with pread(2) in chunk-sized calls into `ring`; returns the bytes read.
int64_t raw_read_file(const std::string& path, ChunkRing& ring);

// Syncs every filesystem, then writes 3 to /proc/sys/vm/drop_caches. Returns "" when the caches
// were dropped, else why not ("Permission denied (errno 13)", "Read-only file system ...").
std::string drop_page_cache();

// Peak resident set of this process so far (getrusage ru_maxrss), in bytes.
int64_t peak_rss_bytes();

}  // namespace zero::bench
