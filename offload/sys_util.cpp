// POSIX helpers of sys_util.h.
#include "sys_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace zero::offload::detail {

bool read_small_file(const std::string& path, std::string* out) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return false;
  std::string text;
  char buf[4096];
  bool ok = true;
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) ok = false;
    if (n <= 0 || text.size() > (1u << 20)) break;
    text.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  if (ok) *out = std::move(text);
  return ok;
}

}  // namespace zero::offload::detail
