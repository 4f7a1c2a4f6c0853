// Helpers for the offload tests: a temporary directory on a real filesystem, random page data,
// and the check that io_uring works here (the tests that need it return early with a warning).
#pragma once

#include <catch2/catch.hpp>

#include "skip.h"
#include "temp_dir.h"
#include <zero/offload/aio.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>

namespace zero::offload::test {

using TempDir = zero::test_support::TempDir;

inline void fill_random(void* data, int64_t bytes, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* words = static_cast<uint64_t*>(data);
  for (int64_t i = 0; i < bytes / 8; ++i) words[i] = rng();
}

// True when io_uring works on this kernel; otherwise the case returns and the executable
// reports skipped (skip.h), not passed.
inline bool io_uring_ok() {
  static const std::string reason = io_uring_unavailable_reason();
  if (!reason.empty()) zero::test_support::skip("io_uring is unavailable here: " + reason);
  return reason.empty();
}

}  // namespace zero::offload::test
