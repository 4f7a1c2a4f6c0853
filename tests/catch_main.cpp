// The Catch2 main, compiled once and linked into every test executable. Exit 77 (ctest:
// Skipped) when all checks passed but a case could not run here (skip.h).
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include "skip.h"

int main(int argc, char** argv) {
  const int failed = Catch::Session().run(argc, argv);
  if (failed == 0 && zero::test_support::skip_flag()) return 77;
  return failed;
}
