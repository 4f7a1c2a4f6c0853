// Crash-safe checkpoint file operations: temporary directories published by rename, atomic
// replacement of small files, fsync of files and directories, and cleanup of crashed saves.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <random>

#include <zero/checkpoint/atomic_files.h>

#include "posix_io.h"

namespace zero::ckpt {

namespace fs = std::filesystem;

namespace {

std::string join(const std::string& parent, const std::string& name) {
  if (parent.empty()) return name;
  return parent.back() == '/' ? parent + name : parent + "/" + name;
}

bool lexists(const std::string& path) {
  struct stat st;
  return ::lstat(path.c_str(), &st) == 0;
}

void rename_or_throw(const std::string& from, const std::string& to, const std::string& what) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    throw detail::checkpoint_error(to, what, ": rename from ", from,
                                   " failed: ", detail::errno_text(errno));
}

// fsyncs every regular file and directory below dir (symbolic links are neither followed nor
// synced), children before their directory.
void sync_tree(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> dirs;
  for (fs::recursive_directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    if (fs::is_regular_file(st)) fsync_path(it->path().string());
    if (fs::is_directory(st)) dirs.push_back(it->path().string());
  }
  if (ec) throw detail::checkpoint_error(dir, "cannot list for fsync: ", ec.message());
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) fsync_path(*it);
  fsync_path(dir);
}

}  // namespace

bool is_safe_component(std::string_view name) {
  if (name.empty() || name.size() > 255 || name == ".") return false;
  if (name.find_first_of(std::string_view("/\\\0", 3)) != std::string_view::npos) return false;
  return name.find("..") == std::string_view::npos;  // also rejects ".."
}

std::string unique_nonce() {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  // Mixed with a clock and a counter in case random_device is deterministic on this platform.
  r ^= static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  r ^= (counter.fetch_add(1) + 1) * 0x9E3779B97F4A7C15ull;
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%ld-%016" PRIx64, static_cast<long>(::getpid()), r);
  return buf;
}

std::string make_temp_dir(const std::string& parent, const std::string& tag,
                          const std::string& nonce) {
  if (!is_safe_component(tag))
    throw detail::checkpoint_error(parent, "unsafe checkpoint tag ", detail::quoted(tag),
                                   " (it must be one path component without '..')");
  if (!is_safe_component(nonce))
    throw detail::checkpoint_error(parent, "unsafe temporary-name nonce ", detail::quoted(nonce));
  std::error_code ec;
  fs::create_directories(parent, ec);
  if (ec) throw detail::checkpoint_error(parent, "cannot create directory: ", ec.message());
  std::string dir = join(parent, tag + ".tmp-" + nonce);
  if (::mkdir(dir.c_str(), 0755) != 0)
    throw detail::checkpoint_error(
        dir, "cannot create temporary directory: ", detail::errno_text(errno));
  return dir;
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) throw detail::checkpoint_error(path, "cannot create directory: ", ec.message());
}

void rename_into_place(const std::string& temp, const std::string& path) {
  try {
    rename_or_throw(temp, path, "cannot replace");
  } catch (...) {
    ::unlink(temp.c_str());
    throw;
  }
  fsync_path(detail::parent_dir(path));
}

void fsync_path(const std::string& path) {
  int raw;
  do {
    raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0)
    throw detail::checkpoint_error(path, "cannot open for fsync: ", detail::errno_text(errno));
  detail::Fd fd(raw);
  if (::fsync(fd.get()) == 0) return;
  int err = errno;
  struct stat st;
  // Some filesystems cannot sync a directory (EINVAL); its entries are then as durable as we can
  // make them.
  if (err == EINVAL && ::fstat(fd.get(), &st) == 0 && S_ISDIR(st.st_mode)) return;
  throw detail::checkpoint_error(path, "fsync failed: ", detail::errno_text(err));
}

void publish_dir(const std::string& temp_dir, const std::string& final_dir) {
  struct stat st;
  if (::lstat(temp_dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw detail::checkpoint_error(temp_dir, "not a directory to publish");
  sync_tree(temp_dir);
  std::string old;
  if (lexists(final_dir)) {
    old = final_dir + ".old-" + unique_nonce();
    rename_or_throw(final_dir, old, "cannot move the previous checkpoint aside");
  }
  if (::rename(temp_dir.c_str(), final_dir.c_str()) != 0) {
    int err = errno;
    if (!old.empty()) ::rename(old.c_str(), final_dir.c_str());  // put the previous one back
    throw detail::checkpoint_error(final_dir, "cannot publish ", temp_dir, ": ",
                                   detail::errno_text(err));
  }
  const std::string parent = detail::parent_dir(final_dir);
  fsync_path(parent);
  if (detail::parent_dir(temp_dir) != parent) fsync_path(detail::parent_dir(temp_dir));
  if (!old.empty()) {
    std::error_code ec;
    fs::remove_all(old, ec);
    if (ec)
      throw detail::checkpoint_error(final_dir, "published, but its previous copy ", old,
                                     " could not be removed: ", ec.message());
  }
}

void atomic_write_file(const std::string& path, std::string_view contents) {
  const std::string temp = path + ".tmp-" + unique_nonce();
  int raw;
  do {
    raw = ::open(temp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOCTTY, 0644);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0)
    throw detail::checkpoint_error(path, "cannot create temporary file ", temp, ": ",
                                   detail::errno_text(errno));
  detail::Fd fd(raw);
  try {
    detail::write_all(fd.get(), contents.data(), contents.size(), path, 0);
    detail::fsync_fd(fd.get(), path);
    fd.close_checked(path);
    rename_or_throw(temp, path, "cannot replace");
  } catch (...) {
    fd.reset();
    ::unlink(temp.c_str());  // the old file at path is untouched
    throw;
  }
  fsync_path(detail::parent_dir(path));
}

std::string read_small_file(const std::string& path, size_t max_bytes) {
  int64_t size = 0;
  detail::Fd fd = detail::open_regular_file(path, &size);
  if (static_cast<uint64_t>(size) > max_bytes)
    throw detail::checkpoint_error(path, "is ", size, " bytes, more than the ", max_bytes,
                                   " expected at most");
  std::string out;
  char buf[65536];
  for (;;) {
    size_t n =
        detail::read_some(fd.get(), buf, sizeof(buf), path, static_cast<int64_t>(out.size()));
    if (n == 0) return out;
    if (n > max_bytes - out.size())
      throw detail::checkpoint_error(path, "grew past ", max_bytes, " bytes while being read");
    out.append(buf, n);
  }
}

void remove_tree(const std::string& path) {
  std::error_code ec;
  fs::remove_all(path, ec);  // removes symbolic links themselves, never their targets
  if (ec) throw detail::checkpoint_error(path, "cannot remove: ", ec.message());
}

std::vector<std::string> list_temp_dirs(const std::string& parent) {
  std::vector<std::string> out;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(parent, ec))) return out;
  for (fs::directory_iterator it(parent, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    size_t pos = name.find(".tmp-");
    if (pos != std::string::npos && pos > 0) out.push_back(join(parent, name));
  }
  if (ec) throw detail::checkpoint_error(parent, "cannot list: ", ec.message());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace zero::ckpt
