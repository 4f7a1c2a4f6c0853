// Write failures: a file size limit (EFBIG, always available) and a full 1 MiB tmpfs (ENOSPC,
// when this process may mount one) must leave no partial file and keep old contents intact.
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>

#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/safetensors.h>

#include "ckpt_test_util.h"

using namespace zero::ckpt;
using ckpt_test::TempDir;

namespace {

// Lowers RLIMIT_FSIZE for its lifetime; SIGXFSZ is ignored so write() fails with EFBIG.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    REQUIRE(getrlimit(RLIMIT_FSIZE, &old_) == 0);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    REQUIRE(setrlimit(RLIMIT_FSIZE, &lim) == 0);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &old_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
};

// A 1 MiB tmpfs mounted on dir/small for its lifetime, if mounting is allowed here.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(const TempDir& dir) : path_(dir / "small") {
    std::filesystem::create_directory(path_);
    mounted_ = mount("tmpfs", path_.c_str(), "tmpfs", 0, "size=1m") == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool mounted_ = false;
};

std::vector<float> floats(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.25f + static_cast<float>(i % 1000);
  return v;
}

}  // namespace

TEST_CASE("write_safetensors past a file size limit: error names path and offset, no file left") {
  TempDir dir;
  auto big = floats(size_t{1} << 20);  // 4 MiB
  auto small = floats(1000);           // staged, then flushed past the limit
  const std::string path = dir / "rank00001.safetensors";
  {
    FileSizeLimit limit(64 << 10);
    CHECK_CKPT_ERROR(write_safetensors(path, {{"big", DType::kF32, {1 << 20}, big.data()}}), path,
                     "write failed at byte ");
    std::vector<TensorToWrite> many;
    for (int i = 0; i < 40; ++i)
      many.push_back({"s" + std::to_string(i), DType::kF32, {1000}, small.data()});
    CHECK_CKPT_ERROR(write_safetensors(path, many), path, "File too large");
  }
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(std::filesystem::is_empty(dir.path()));
  write_safetensors(path, {{"big", DType::kF32, {1 << 20}, big.data()}});  // fine without the limit
}

TEST_CASE("atomic_write_file past a file size limit leaves the old content") {
  TempDir dir;
  const std::string path = dir / "latest";
  atomic_write_file(path, "global_step10");
  {
    FileSizeLimit limit(4096);
    CHECK_CKPT_ERROR(atomic_write_file(path, std::string(100000, 'x')), path, "write failed");
  }
  CHECK(read_small_file(path, 100) == "global_step10");
  CHECK(list_temp_dirs(dir.path()).empty());
}

TEST_CASE("a full filesystem (ENOSPC on a 1 MiB tmpfs)") {
  TempDir dir;
  SmallTmpfs fs(dir);
  if (!fs.mounted()) {
    WARN(
        "cannot mount a tmpfs here (not root?): ENOSPC test skipped; the EFBIG tests cover the "
        "paths");
    return;
  }
  auto big = floats(size_t{1} << 19);  // 2 MiB
  const std::string path = fs.path() + "/rank00000.safetensors";
  CHECK_CKPT_ERROR(write_safetensors(path, {{"w", DType::kF32, {1 << 19}, big.data()}}), path,
                   "No space left on device");
  CHECK_FALSE(std::filesystem::exists(path));

  const std::string latest = fs.path() + "/latest";
  atomic_write_file(latest, "tag1");
  CHECK_CKPT_ERROR(atomic_write_file(latest, std::string(size_t{2} << 20, 'y')), latest,
                   "No space left");
  CHECK(read_small_file(latest, 100) == "tag1");
  CHECK(list_temp_dirs(fs.path()).empty());

  // Space is back once the failed writes are gone: a file that fits is written and read back.
  auto fits = floats(1000);
  FileDigest d = write_safetensors(path, {{"w", DType::kF32, {1000}, fits.data()}});
  CHECK(digest_file(path) == d);
}
