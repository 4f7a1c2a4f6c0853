// The NVMe swap directory of one rank: nvme_path/<job id>/rank<N>/, its swap files (opened
// O_DIRECT, preallocated) and `zero clean-swap`'s removal of directories left by dead jobs.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace zero::offload {

// One open swap file: O_RDWR|O_DIRECT|O_CLOEXEC, mode 0600, preallocated to size_bytes().
// Move-only; closes in the destructor (the file itself goes with its SwapDir).
class SwapFile {
 public:
  SwapFile() = default;
  ~SwapFile();
  SwapFile(SwapFile&& other) noexcept;
  SwapFile& operator=(SwapFile&& other) noexcept;
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  const std::string& path() const { return path_; }
  int fd() const { return fd_; }
  // The preallocated size: the size asked of create_file, rounded up to kIoAlign. A write past
  // it extends the file (and may then fail with ENOSPC).
  int64_t size_bytes() const { return size_bytes_; }

 private:
  friend class SwapDir;
  SwapFile(std::string path, int fd, int64_t size_bytes)
      : path_(std::move(path)), fd_(fd), size_bytes_(size_bytes) {}
  void close_fd() noexcept;

  std::string path_;
  int fd_ = -1;
  int64_t size_bytes_ = 0;
};

// nvme_path/<job id>/rank<N>/: the job dir and the rank dir are mode 0700; the rank dir holds a
// small `owner` file (host, pid, process start time, boot id) that clean_swap() reads. The
// destructor removes the rank dir with its files, then the job dir when it is empty. A rank dir
// left by a dead process of this host (same job id, e.g. after a crash) is removed and made
// anew; one whose owner may still live is a ConfigError. Movable; not copyable.
class SwapDir {
 public:
  // Validates nvme_path first: missing, not a directory, not writable, or on a filesystem that
  // refuses O_DIRECT (probe: a temporary file opened O_DIRECT and written 4096 aligned bytes) is
  // a ConfigError naming json_key ("zero_optimization.offload_optimizer.nvme_path"), the path,
  // the reason and the fallback. job_id: one path component (no '/').
  SwapDir(const std::string& nvme_path, const std::string& job_id, int rank,
          const std::string& json_key);
  ~SwapDir();
  SwapDir(SwapDir&& other) noexcept;
  SwapDir& operator=(SwapDir&& other) noexcept;
  SwapDir(const SwapDir&) = delete;
  SwapDir& operator=(const SwapDir&) = delete;

  const std::string& path() const { return path_; }          // the rank dir
  const std::string& job_path() const { return job_path_; }  // its parent, the job dir
  int rank() const { return rank_; }

  // Creates `name` (a plain file name, not "owner") in the rank dir with O_EXCL, mode 0600, and
  // preallocates align_up(bytes) with fallocate (ftruncate where the filesystem has no
  // fallocate). ENOSPC and every other failure: IoError naming the file, the size and the rank.
  SwapFile create_file(const std::string& name, int64_t bytes);

 private:
  void remove_all() noexcept;

  std::string path_, job_path_;
  int rank_ = -1;
};

// Who created a rank dir, as written to its `owner` file.
struct SwapOwner {
  std::string host;
  pid_t pid = 0;
  uint64_t start_ticks = 0;  // /proc/<pid>/stat field 22: tells a reused pid apart
  std::string boot_id;       // /proc/sys/kernel/random/boot_id: tells a reboot apart

  static SwapOwner of_process(pid_t pid);  // for this host; start_ticks 0 when pid is gone
  std::string to_text() const;             // "host H\npid P\nstart S\nboot B\n"
  static bool parse(const std::string& text, SwapOwner* out);
  // True when the process is provably gone: on this host, and the host rebooted, or the pid is
  // free, or it now belongs to a process started at another time. *why says why (or why not:
  // alive, or on another host where its pid cannot be checked).
  bool is_gone(std::string* why) const;
};

// For `zero clean-swap PATH`: each directory under path whose entries are all rank<N> dirs is a
// job dir. It is stale when every rank dir has an owner file naming this host and a process that
// is gone (or whose pid now belongs to another process); stale job dirs are removed, and with
// force every job dir. Anything else under path is kept, with the reason.
struct CleanResult {
  std::vector<std::string> removed;
  std::vector<std::pair<std::string, std::string>> kept;  // path, why
};
CleanResult clean_swap(const std::string& path, bool force);

}  // namespace zero::offload
