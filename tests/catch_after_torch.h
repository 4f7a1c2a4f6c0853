// Catch2 for tests that include LibTorch headers (include this after them): Debian's LibTorch
// pulls in glog, whose CHECK macros would otherwise replace Catch's and abort on failure.
#pragma once

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE
#undef CHECK_THROWS
#include <catch2/catch.hpp>
