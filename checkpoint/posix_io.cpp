// POSIX file helpers of posix_io.h: every system call retried on EINTR and continued after a
// partial transfer, every failure a CheckpointError naming the file, the offset and strerror.
#include "posix_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace zero::ckpt::detail {

namespace {
// Linux transfers at most 0x7ffff000 bytes per call; stay below it.
constexpr size_t kMaxTransfer = size_t{1} << 30;
}  // namespace

Fd& Fd::operator=(Fd&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.release();
  }
  return *this;
}

void Fd::reset() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Fd::close_checked(const std::string& path) {
  int fd = release();
  // Linux closes the descriptor even when close() fails, so it is never retried.
  if (fd >= 0 && ::close(fd) != 0 && errno != EINTR)
    throw checkpoint_error(path, "close failed: ", errno_text(errno));
}

Fd open_regular_file(const std::string& path, int64_t* bytes) {
  int fd;
  do {  // O_NONBLOCK: opening a FIFO planted in a checkpoint directory must not hang
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) throw checkpoint_error(path, "cannot open: ", errno_text(errno));
  Fd owned(fd);
  struct stat st;
  if (::fstat(fd, &st) != 0) throw checkpoint_error(path, "cannot stat: ", errno_text(errno));
  if (!S_ISREG(st.st_mode)) throw checkpoint_error(path, "not a regular file");
  int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw checkpoint_error(path, "fcntl failed: ", errno_text(errno));
  *bytes = static_cast<int64_t>(st.st_size);
  return owned;
}

void write_all(int fd, const void* data, size_t n, const std::string& path, int64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, std::min(n, kMaxTransfer));
    if (w < 0 && errno == EINTR) continue;
    // write() returning 0 for a non-zero count means no progress is possible: treat as ENOSPC.
    int err = w < 0 ? errno : ENOSPC;
    if (w <= 0)
      throw checkpoint_error(path, "write failed at byte ", offset, ": ", errno_text(err));
    p += w;
    n -= static_cast<size_t>(w);
    offset += w;
  }
}

void pread_exact(int fd, void* out, size_t n, int64_t offset, const std::string& path,
                 const char* what) {
  char* p = static_cast<char*>(out);
  while (n > 0) {
    ssize_t r = ::pread(fd, p, std::min(n, kMaxTransfer), static_cast<off_t>(offset));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0)
      throw checkpoint_error(path, "read of ", what, " failed at byte ", offset, ": ",
                             errno_text(errno));
    if (r == 0)
      throw checkpoint_error(path, "file ends at byte ", offset, " while reading ", what,
                             " (truncated while open?)");
    p += r;
    n -= static_cast<size_t>(r);
    offset += r;
  }
}

size_t read_some(int fd, void* out, size_t n, const std::string& path, int64_t offset) {
  for (;;) {
    ssize_t r = ::read(fd, out, std::min(n, kMaxTransfer));
    if (r >= 0) return static_cast<size_t>(r);
    if (errno != EINTR)
      throw checkpoint_error(path, "read failed at byte ", offset, ": ", errno_text(errno));
  }
}

void fsync_fd(int fd, const std::string& path) {
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) throw checkpoint_error(path, "fsync failed: ", errno_text(errno));
}

std::string parent_dir(const std::string& path) {
  size_t end = path.find_last_not_of('/');
  if (end == std::string::npos) return "/";
  size_t slash = path.find_last_of('/', end);
  if (slash == std::string::npos) return ".";
  size_t keep = path.find_last_not_of('/', slash);
  return keep == std::string::npos ? "/" : path.substr(0, keep + 1);
}

}  // namespace zero::ckpt::detail
