// Skipping from inside a Catch2 test: a case that cannot test what it names on this machine
// (io_uring refused, a tool missing) calls skip(why); when every check passed, the executable
// then exits 77, which ctest reports as Skipped (SKIP_RETURN_CODE) rather than Passed.
#pragma once

#include <catch2/catch.hpp>

#include <atomic>
#include <string>

namespace zero::test_support {

inline std::atomic<bool>& skip_flag() {
  static std::atomic<bool> flag{false};
  return flag;
}

inline void skip(const std::string& why) {
  WARN("skipped: " << why);
  skip_flag() = true;
}

}  // namespace zero::test_support
