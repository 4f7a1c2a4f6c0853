// Failures that need a special filesystem, mounted by swap_mounts.sh: a full 1 MiB tmpfs (the
// preallocation and a write past it fail with IoError naming file, size or offset, and rank), a
// read-only mount and a ramfs without O_DIRECT (ConfigErrors). Run alone, it skips with a warning.
#include <zero/error.h>
#include <zero/offload/aio.h>

#include "offload_test_util.h"

using namespace zero::offload;
using zero::offload::test::fill_random;
using zero::offload::test::io_uring_ok;
namespace fs = std::filesystem;

namespace {
constexpr const char* kKey = "zero_optimization.offload_optimizer.nvme_path";

const char* mounted(const char* var) {
  const char* dir = std::getenv(var);
  if (dir == nullptr || *dir == '\0')
    WARN("skipped: " << var << " is not set; run this test through swap_mounts.sh (as root)");
  return dir && *dir ? dir : nullptr;
}
}  // namespace

TEST_CASE("a full disk: preallocation fails with IoError naming file, size and rank",
          "[offload][mounts]") {
  const char* full = mounted("ZERO_TEST_FULL_DIR");
  if (full == nullptr) return;
  SwapDir dir(full, "job", 1, kKey);
  try {
    dir.create_file("optimizer.swp", 4 * 1048576);
    FAIL("no IoError");
  } catch (const zero::IoError& e) {
    CHECK_THAT(e.what(),
               Catch::StartsWith("rank 1: cannot preallocate (fallocate) swap file " + dir.path() +
                                 "/optimizer.swp (4194304 bytes): No "
                                 "space left on device"));
  }
  CHECK_FALSE(fs::exists(dir.path() + "/optimizer.swp"));  // removed again
  SwapFile ok = dir.create_file("small.swp", 65536);       // the disk still takes small files
  CHECK(ok.size_bytes() == 65536);
}

TEST_CASE("a full disk: a write past the preallocated size fails naming file and offset",
          "[offload][mounts]") {
  const char* full = mounted("ZERO_TEST_FULL_DIR");
  if (full == nullptr || !io_uring_ok()) return;
  SwapDir dir(full, "job", 2, kKey);
  SwapFile file = dir.create_file("grad.swp", 512 * 1024);
  const int64_t bytes = 2 * 1048576;
  AlignedBuffer buf(bytes);
  fill_random(buf.data(), bytes, 3);
  AioOptions o;
  o.block_size_bytes = 1048576;
  o.queue_depth = 1;
  AioEngine aio(o, 2);
  auto fine = aio.write(file, 0, buf.data(), 512 * 1024);  // inside the preallocation
  auto past = aio.write(file, 0, buf.data(), bytes);
  aio.wait(fine);
  try {
    aio.wait(past);
    FAIL("no IoError");
  } catch (const zero::IoError& e) {
    const std::string what = e.what();
    INFO(what);
    CHECK_THAT(what, Catch::StartsWith("rank 2: io_uring write of " + file.path() + " at offset "));
    CHECK_THAT(what, Catch::Contains("No space left on device (errno 28)"));
    CHECK_THAT(what, Catch::Contains("in a request of 2097152 bytes at offset 0"));
  }
  CHECK(aio.bytes_written() == 512 * 1024);
}

TEST_CASE("a read-only mount is a ConfigError", "[offload][mounts]") {
  const char* ro = mounted("ZERO_TEST_RO_DIR");
  if (ro == nullptr) return;
  CHECK_THROWS_WITH(SwapDir(ro, "job", 0, kKey),
                    Catch::StartsWith(std::string(kKey) + ": nvme_path \"" + ro + "\"") &&
                        Catch::Contains("is not writable") &&
                        Catch::Contains("Read-only file system") &&
                        Catch::Contains("use device \"cpu\""));
  CHECK_THROWS_AS(SwapDir(ro, "job", 0, kKey), zero::ConfigError);
}

TEST_CASE("a filesystem without O_DIRECT is a ConfigError", "[offload][mounts]") {
  const char* ramfs = mounted("ZERO_TEST_RAMFS_DIR");
  if (ramfs == nullptr) return;
  CHECK_THROWS_WITH(SwapDir(ramfs, "job", 0, kKey),
                    Catch::Contains("refuses O_DIRECT") && Catch::Contains("Invalid argument") &&
                        Catch::Contains("use device \"cpu\" or a path on a local disk"));
  CHECK(fs::is_empty(ramfs));  // the probe file is gone
}
