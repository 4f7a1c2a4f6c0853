// Helpers for the offload tests: a temporary directory on a real filesystem, random page data,
// and the check that io_uring works here (the tests that need it return early with a warning).
#pragma once

#include <catch2/catch.hpp>
#include <zero/offload/aio.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace zero::offload::test {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it at the end.
class TempDir {
 public:
  explicit TempDir(const char* prefix = "zero_offload") {
    const char* base = std::getenv("TMPDIR");
    std::string templ = std::string(base && *base ? base : "/tmp") + "/" + prefix + ".XXXXXX";
    REQUIRE(::mkdtemp(templ.data()) != nullptr);
    path_ = templ;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void fill_random(void* data, int64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* words = static_cast<uint64_t*>(data);
  for (int64_t i = 0; i < bytes / 8; ++i) words[i] = rng();
}

// True when io_uring works on this kernel; otherwise warns (the test then passes vacuously).
inline bool io_uring_ok() {
  static const std::string reason = io_uring_unavailable_reason();
  if (!reason.empty()) WARN("skipped: io_uring is unavailable here: " << reason);
  return reason.empty();
}

}  // namespace zero::offload::test
