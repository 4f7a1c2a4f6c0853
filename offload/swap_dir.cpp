// SwapDir and SwapFile (swap_dir.h): validation of nvme_path (with an O_DIRECT probe), the
// 0700 job and rank directories with their owner file, and preallocated 0600 swap files.
#include <zero/error.h>
#include <zero/offload/aligned_buffer.h>
#include <zero/offload/swap_dir.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <utility>

#include "sys_util.h"

namespace zero::offload {

namespace {

using detail::errno_text;
namespace fs = std::filesystem;

int open_retry(const std::string& path, int flags, mode_t mode) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, mode);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

ConfigError path_error(const std::string& json_key, const std::string& path,
                       const std::string& reason) {
  return ConfigError(::zero::detail::str(json_key, ": nvme_path \"", path, "\" ", reason,
                                         "; use device \"cpu\" or a path on a local disk"));
}

// "" when a file in dir can be created, opened O_DIRECT and written 4096 aligned bytes; else
// why not, phrased to follow the path ("is not writable (...)").
std::string probe_o_direct(const std::string& dir) {
  static std::atomic<int> counter{0};
  const std::string probe =
      ::zero::detail::str(dir, "/.zero-odirect-probe-", ::getpid(), "-", counter.fetch_add(1));
  int fd = open_retry(probe, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    int err = errno;
    // Linux creates the file before it refuses O_DIRECT: remove it unless it was not ours.
    if (err != EEXIST) ::unlink(probe.c_str());
    if (err == EINVAL)
      return "is on a filesystem that refuses O_DIRECT (open: " + errno_text(err) + ")";
    if (err == EACCES || err == EPERM || err == EROFS)
      return "is not writable (creating a file: " + errno_text(err) + ")";
    return "cannot hold files (creating " + probe + ": " + errno_text(err) + ")";
  }
  std::string reason;
  void* page = nullptr;
  if (::posix_memalign(&page, static_cast<size_t>(kIoAlign), static_cast<size_t>(kIoAlign)) != 0) {
    reason = "cannot be probed (no memory for a 4096-byte buffer)";
  } else {
    std::memset(page, 0x5a, static_cast<size_t>(kIoAlign));
    ssize_t n;
    do {
      n = ::pwrite(fd, page, static_cast<size_t>(kIoAlign), 0);
    } while (n < 0 && errno == EINTR);
    int err = errno;
    if (n < 0 && err == EINVAL)
      reason = "is on a filesystem that refuses O_DIRECT (an aligned 4096-byte write: " +
               errno_text(err) + ")";
    else if (n < 0)
      reason = "refused a 4096-byte O_DIRECT write: " + errno_text(err);
    else if (n != kIoAlign)
      reason = ::zero::detail::str("took only ", n, " of 4096 bytes of an O_DIRECT write");
    std::free(page);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  return reason;
}

bool plain_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

// Creates dir with mode 0700 (exactly: chmod after the umask); an existing directory is fine.
// Returns false when it existed.
bool make_private_dir(const std::string& dir, int rank) {
  if (::mkdir(dir.c_str(), 0700) == 0) {
    if (::chmod(dir.c_str(), 0700) != 0)
      throw IoError(
          ::zero::detail::str("rank ", rank, ": cannot chmod 0700 ", dir, ": ", errno_text(errno)));
    return true;
  }
  int err = errno;
  struct stat st;
  if (err == EEXIST && ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return false;
  if (err == EEXIST)
    throw IoError(::zero::detail::str("rank ", rank, ": cannot create swap directory ", dir,
                                      ": something that is not a directory is in the way"));
  throw IoError(::zero::detail::str("rank ", rank, ": cannot create swap directory ", dir, ": ",
                                    errno_text(err)));
}

void write_text_file(const std::string& path, const std::string& text, int rank) {
  int fd = open_retry(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    throw IoError(
        ::zero::detail::str("rank ", rank, ": cannot create ", path, ": ", errno_text(errno)));
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int err = n < 0 ? errno : ENOSPC;
      ::close(fd);
      throw IoError(
          ::zero::detail::str("rank ", rank, ": cannot write ", path, ": ", errno_text(err)));
    }
    done += static_cast<size_t>(n);
  }
  if (::close(fd) != 0 && errno != EINTR)
    throw IoError(
        ::zero::detail::str("rank ", rank, ": cannot close ", path, ": ", errno_text(errno)));
}

std::string trimmed(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

std::string this_boot_id() {
  std::string id;
  detail::read_small_file("/proc/sys/kernel/random/boot_id", &id);
  return trimmed(id);
}

// Field 22 of /proc/<pid>/stat (after the ")" that ends the command name); 0 when unreadable.
uint64_t start_ticks_of(pid_t pid) {
  std::string stat;
  if (!detail::read_small_file("/proc/" + std::to_string(pid) + "/stat", &stat)) return 0;
  size_t pos = stat.rfind(')');
  if (pos == std::string::npos) return 0;
  // After ")": field 3 (state) is the first; field 22 is the 20th from there.
  const char* p = stat.c_str() + pos + 1;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
  }
  return std::strtoull(p, nullptr, 10);
}

}  // namespace

// --- SwapFile ---------------------------------------------------------------------------------

void SwapFile::close_fd() noexcept {
  if (fd_ >= 0) ::close(fd_);  // nothing was written through the page cache: no error to lose
  fd_ = -1;
}

SwapFile::~SwapFile() {
  close_fd();
}

SwapFile::SwapFile(SwapFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

SwapFile& SwapFile::operator=(SwapFile&& other) noexcept {
  if (this != &other) {
    close_fd();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

// --- SwapOwner --------------------------------------------------------------------------------

SwapOwner SwapOwner::of_process(pid_t pid) {
  SwapOwner owner;
  owner.host = this_host();
  owner.pid = pid;
  owner.start_ticks = start_ticks_of(pid);
  owner.boot_id = this_boot_id();
  return owner;
}

std::string SwapOwner::to_text() const {
  return ::zero::detail::str("host ", host, "\npid ", pid, "\nstart ", start_ticks, "\nboot ",
                             boot_id, "\n");
}

bool SwapOwner::parse(const std::string& text, SwapOwner* out) {
  SwapOwner owner;
  bool has_host = false, has_pid = false;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    const size_t space = line.find(' ');
    if (space == std::string::npos) continue;
    const std::string key = line.substr(0, space), value = line.substr(space + 1);
    char* rest = nullptr;
    if (key == "host") {
      owner.host = value;
      has_host = !value.empty();
    } else if (key == "pid") {
      long pid = std::strtol(value.c_str(), &rest, 10);
      has_pid = rest != value.c_str() && *rest == '\0' && pid > 0;
      owner.pid = static_cast<pid_t>(pid);
    } else if (key == "start") {
      owner.start_ticks = std::strtoull(value.c_str(), nullptr, 10);
    } else if (key == "boot") {
      owner.boot_id = value;
    }
  }
  if (!has_host || !has_pid) return false;
  *out = owner;
  return true;
}

bool SwapOwner::is_gone(std::string* why) const {
  const std::string who = ::zero::detail::str("pid ", pid, " on host ", host);
  if (host != this_host()) {
    *why = "owned by " + who + " (not this host: cannot check it from here)";
    return false;
  }
  if (!boot_id.empty() && boot_id != this_boot_id()) {
    *why = "owner " + who + " ran before this host's last reboot";
    return true;
  }
  if (::kill(pid, 0) != 0 && errno == ESRCH) {
    *why = "owner " + who + " is gone";
    return true;
  }
  const uint64_t now = start_ticks_of(pid);
  if (now != 0 && start_ticks != 0 && now != start_ticks) {
    *why = "owner " + who + " is gone (the pid now belongs to another process)";
    return true;
  }
  *why = "in use by " + who;
  return false;
}

// --- SwapDir ----------------------------------------------------------------------------------

SwapDir::SwapDir(const std::string& nvme_path, const std::string& job_id, int rank,
                 const std::string& json_key)
    : rank_(rank) {
  ZERO_CHECK(plain_name(job_id), UsageError, "SwapDir: job id \"", job_id,
             "\" must be one non-empty path component");
  ZERO_CHECK(rank >= 0, UsageError, "SwapDir: rank ", rank, " < 0");
  ZERO_CHECK(!nvme_path.empty(), ConfigError, json_key,
             ": nvme_path is empty; use device \"cpu\" or a path on a local disk");
  struct stat st;
  if (::stat(nvme_path.c_str(), &st) != 0) {
    int err = errno;
    throw path_error(
        json_key, nvme_path,
        (err == ENOENT ? "does not exist (" : "cannot be used (") + errno_text(err) + ")");
  }
  if (!S_ISDIR(st.st_mode)) throw path_error(json_key, nvme_path, "is not a directory");
  if (::access(nvme_path.c_str(), W_OK | X_OK) != 0)
    throw path_error(json_key, nvme_path, "is not writable (" + errno_text(errno) + ")");
  const std::string probe_reason = probe_o_direct(nvme_path);
  if (!probe_reason.empty()) throw path_error(json_key, nvme_path, probe_reason);

  std::string base = nvme_path;
  while (base.size() > 1 && base.back() == '/') base.pop_back();
  job_path_ = (base == "/" ? "" : base) + "/" + job_id;
  const bool made_job_dir = make_private_dir(job_path_, rank);
  path_ = ::zero::detail::str(job_path_, "/rank", rank);
  try {
    if (!make_private_dir(path_, rank)) {
      // Left by an earlier run with this job id: reused only when its owner is provably gone.
      std::string text, why = "has no readable owner file";
      SwapOwner owner;
      const bool gone = detail::read_small_file(path_ + "/owner", &text) &&
                        SwapOwner::parse(text, &owner) && owner.is_gone(&why);
      if (!gone) {
        const std::string held = path_;
        path_.clear();  // not ours: the destructor must leave it alone
        throw ConfigError(
            ::zero::detail::str(json_key, ": swap directory ", held, " already exists and ", why,
                                "; use another job id, or remove it with `zero clean-swap ",
                                nvme_path, "` (--force when its owner is known to be dead)"));
      }
      std::error_code ec;
      fs::remove_all(path_, ec);
      if (ec)
        throw IoError(::zero::detail::str(
            "rank ", rank, ": cannot remove the stale swap directory ", path_, ": ", ec.message()));
      make_private_dir(path_, rank);
    }
    write_text_file(path_ + "/owner", SwapOwner::of_process(::getpid()).to_text(), rank);
  } catch (...) {
    remove_all();
    if (made_job_dir) ::rmdir(job_path_.c_str());
    throw;
  }
}

SwapDir::~SwapDir() {
  remove_all();
}

SwapDir::SwapDir(SwapDir&& other) noexcept
    : path_(std::exchange(other.path_, std::string())),
      job_path_(std::exchange(other.job_path_, std::string())),
      rank_(other.rank_) {}

SwapDir& SwapDir::operator=(SwapDir&& other) noexcept {
  if (this != &other) {
    remove_all();
    path_ = std::exchange(other.path_, std::string());
    job_path_ = std::exchange(other.job_path_, std::string());
    rank_ = other.rank_;
  }
  return *this;
}

void SwapDir::remove_all() noexcept {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
  ::rmdir(job_path_.c_str());  // fails (ENOTEMPTY) while other ranks still use it: fine
  path_.clear();
}

SwapFile SwapDir::create_file(const std::string& name, int64_t bytes) {
  ZERO_CHECK(!path_.empty(), UsageError, "SwapDir::create_file on a moved-from SwapDir");
  ZERO_CHECK(plain_name(name) && name != "owner", UsageError, "rank ", rank_, ": swap file name \"",
             name, "\" must be a plain file name other than \"owner\"");
  ZERO_CHECK(bytes >= 0, UsageError, "rank ", rank_, ": swap file ", name, ": negative size ",
             bytes);
  const int64_t size = align_up(bytes);
  const std::string file = path_ + "/" + name;
  int fd = open_retry(file, O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err != EEXIST) ::unlink(file.c_str());  // created before O_DIRECT was refused
    throw IoError(::zero::detail::str("rank ", rank_, ": cannot create swap file ", file, " (",
                                      size, " bytes): ", errno_text(err)));
  }
  SwapFile swap(file, fd, size);  // closes on the way out of a failure below
  auto fail = [&](const char* what, int err) {
    ::unlink(file.c_str());
    return IoError(::zero::detail::str("rank ", rank_, ": cannot ", what, " swap file ", file, " (",
                                       size, " bytes): ", errno_text(err),
                                       err == ENOSPC ? "; free space on the nvme_path disk" : ""));
  };
  if (::fchmod(fd, 0600) != 0) throw fail("chmod 0600", errno);
  if (size > 0) {
    int rc;
    do {
      rc = ::fallocate(fd, 0, 0, size);
    } while (rc != 0 && errno == EINTR);
    if (rc != 0 && (errno == EOPNOTSUPP || errno == ENOSYS)) {
      // No preallocation on this filesystem: size the file; the blocks come with the writes.
      do {
        rc = ::ftruncate(fd, size);
      } while (rc != 0 && errno == EINTR);
      if (rc != 0) throw fail("size (ftruncate)", errno);
    } else if (rc != 0) {
      throw fail("preallocate (fallocate)", errno);
    }
  }
  return swap;
}

// --- clean_swap -------------------------------------------------------------------------------

namespace {
bool is_rank_dir_name(const std::string& name) {
  if (name.size() <= 4 || name.compare(0, 4, "rank") != 0) return false;
  for (size_t i = 4; i < name.size(); ++i)
    if (name[i] < '0' || name[i] > '9') return false;
  return true;
}

// "" when job_dir is a swap job dir whose owners are all gone; else why it is kept. With force,
// only whether it looks like a swap job dir at all.
std::string why_keep(const fs::path& job_dir, bool force) {
  std::error_code ec;
  std::vector<std::string> reasons;
  int ranks = 0;
  for (fs::directory_iterator it(job_dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!is_rank_dir_name(name) || !it->is_directory(ec) || it->is_symlink(ec))
      return "not a swap job directory (holds " + name + ")";
    ++ranks;
    std::string text, why;
    SwapOwner owner;
    if (!detail::read_small_file(it->path().string() + "/owner", &text) ||
        !SwapOwner::parse(text, &owner))
      reasons.push_back(name + " has no readable owner file");
    else if (!owner.is_gone(&why))
      reasons.push_back(name + " " + why);
  }
  if (ec) return "cannot be listed: " + ec.message();
  if (ranks == 0) return "empty: not a swap job directory";
  if (force || reasons.empty()) return "";
  std::string all;
  for (const std::string& r : reasons) all += (all.empty() ? "" : "; ") + r;
  return all;
}
}  // namespace

CleanResult clean_swap(const std::string& path, bool force) {
  std::error_code ec;
  std::vector<fs::path> dirs;
  for (fs::directory_iterator it(path, ec), end; !ec && it != end; it.increment(ec))
    if (it->is_directory(ec) && !it->is_symlink(ec)) dirs.push_back(it->path());
  if (ec) throw IoError("clean-swap: cannot list " + path + ": " + ec.message());
  std::sort(dirs.begin(), dirs.end());
  CleanResult result;
  for (const fs::path& dir : dirs) {
    std::string why = why_keep(dir, force);
    if (why.empty()) {
      fs::remove_all(dir, ec);
      if (!ec) {
        result.removed.push_back(dir.string());
        continue;
      }
      why = "removal failed: " + ec.message();
    }
    result.kept.emplace_back(dir.string(), why);
  }
  return result;
}

}  // namespace zero::offload
