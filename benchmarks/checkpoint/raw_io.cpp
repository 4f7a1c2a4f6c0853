// The raw-I/O side of checkpoint_bench (raw_io.h): plain POSIX calls, each checked and retried on
// EINTR; errors name the file and the byte offset.
#include "raw_io.h"

#include <zero/error.h>
#include <zero/text.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <random>

namespace zero::bench {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

using ::zero::detail::errno_text;

[[noreturn]] void fail(const std::string& path, const std::string& what, int err) {
  throw CheckpointError(detail::str("checkpoint_bench: ", path, ": ", what, ": ", errno_text(err)));
}

}  // namespace

ChunkRing::ChunkRing(size_t ring_bytes, size_t chunk_bytes)
    : ring_bytes_(ring_bytes), chunk_bytes_(chunk_bytes) {
  ZERO_CHECK(chunk_bytes > 0 && chunk_bytes % 4096 == 0 && ring_bytes >= chunk_bytes &&
                 ring_bytes % chunk_bytes == 0,
             UsageError, "checkpoint_bench: the ring (", ring_bytes,
             " bytes) must be a multiple of the chunk (", chunk_bytes,
             " bytes), a positive multiple of 4 KiB");
  void* p = nullptr;
  if (::posix_memalign(&p, 4096, ring_bytes) != 0) throw std::bad_alloc();
  data_ = static_cast<char*>(p);
  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> value(0.5f, 1.5f);
  float* f = reinterpret_cast<float*>(data_);
  for (size_t i = 0; i < ring_bytes / sizeof(float); ++i) f[i] = value(rng);
}

ChunkRing::~ChunkRing() {
  std::free(data_);
}

char* ChunkRing::next() {
  char* p = data_ + at_;
  at_ = (at_ + chunk_bytes_) % ring_bytes_;
  return p;
}

WriteTimes raw_write_file(const std::string& path, int64_t file_bytes, ChunkRing& ring,
                          int64_t writeback_every_bytes) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(path, "cannot create", errno);
  WriteTimes t;
  const auto t0 = Clock::now();
  int64_t done = 0, flushed = 0;
  while (done < file_bytes) {
    const size_t n = static_cast<size_t>(std::min<int64_t>(file_bytes - done, ring.chunk_bytes()));
    const char* src = ring.next();
    size_t off = 0;
    while (off < n) {
      const ssize_t w = ::write(fd, src + off, n - off);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        const int err = w < 0 ? errno : ENOSPC;
        ::close(fd);
        fail(path, detail::str("write at byte ", done + static_cast<int64_t>(off)), err);
      }
      off += static_cast<size_t>(w);
    }
    done += static_cast<int64_t>(n);
    if (writeback_every_bytes > 0 && done - flushed >= writeback_every_bytes) {
      // Start write-back of this range without waiting for it.
      if (::sync_file_range(fd, flushed, done - flushed, SYNC_FILE_RANGE_WRITE) != 0) {
        const int err = errno;
        ::close(fd);
        fail(path, "sync_file_range", err);
      }
      flushed = done;
    }
  }
  t.write_s = seconds_since(t0);
  const auto t1 = Clock::now();
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) {
    const int err = errno;
    ::close(fd);
    fail(path, "fsync", err);
  }
  t.fsync_s = seconds_since(t1);
  if (::close(fd) != 0 && errno != EINTR) fail(path, "close", errno);
  return t;
}

int64_t raw_read_file(const std::string& path, ChunkRing& ring) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(path, "cannot open", errno);
  int64_t done = 0;
  for (;;) {
    const ssize_t r = ::pread(fd, ring.next(), ring.chunk_bytes(), static_cast<off_t>(done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      fail(path, detail::str("pread at byte ", done), err);
    }
    if (r == 0) break;
    done += r;
  }
  ::close(fd);
  return done;
}

std::string drop_page_cache() {
  ::sync();
  const int fd = ::open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
  if (fd < 0) return errno_text(errno);
  const ssize_t w = ::write(fd, "3\n", 2);
  const int err = errno;
  ::close(fd);
  return w == 2 ? "" : errno_text(w < 0 ? err : EIO);
}

int64_t peak_rss_bytes() {
  struct rusage u;
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<int64_t>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace zero::bench
