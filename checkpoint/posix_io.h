// POSIX file helpers shared by the checkpoint writer, reader and atomic file operations: an owned
// descriptor, whole-buffer write and pread loops (EINTR, partial transfers) that throw with
// context.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <zero/checkpoint/errors.h>
#include <zero/text.h>

namespace zero::ckpt::detail {

using ::zero::detail::errno_text;

// An owned file descriptor; closes (ignoring errors) on destruction. close_checked() is the
// close whose error matters (after writing).
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& o) noexcept : fd_(o.release()) {}
  Fd& operator=(Fd&& o) noexcept;
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset();
  void close_checked(const std::string& path);

 private:
  int fd_ = -1;
};

// Opens path for reading a regular file (not a FIFO, device or directory); fills *bytes.
Fd open_regular_file(const std::string& path, int64_t* bytes);

// Writes all n bytes at the file's position; `offset` is only for the error message.
void write_all(int fd, const void* data, size_t n, const std::string& path, int64_t offset);

// Reads exactly n bytes at `offset`; a short read (file truncated) or error throws, naming `what`.
void pread_exact(int fd, void* out, size_t n, int64_t offset, const std::string& path,
                 const char* what);

// Reads up to n bytes at the position; returns the count (0 at end of file).
size_t read_some(int fd, void* out, size_t n, const std::string& path, int64_t offset);

void fsync_fd(int fd, const std::string& path);

// "a/b/c" -> "a/b"; "c" -> "."; "/c" -> "/".
std::string parent_dir(const std::string& path);

}  // namespace zero::ckpt::detail
