// ScalarVec: the one-lane "vector" of the SIMD abstraction. It runs the scalar tails of the
// vectorized kernels (Adam's tail runs the vector code on a padded copy instead) and is the
// whole kernel on CPUs without AVX2.
#pragma once

#include <cmath>
#include <cstdint>

#include "half_scalar.h"

namespace zero::kernels::detail {

struct ScalarVec {
  using V = float;
  using DAcc = double;
  static constexpr int kWidth = 1;
  static V load(const float* p) { return *p; }
  static void store(float* p, V x) { *p = x; }
  static V set1(float x) { return x; }
  static V zero() { return 0.0f; }
  static V add(V a, V b) { return a + b; }
  static V mul(V a, V b) { return a * b; }
  static V div(V a, V b) { return a / b; }
  static V sqrt(V a) { return std::sqrt(a); }
  static V fmadd(V a, V b, V c) { return a * b + c; }   // a*b + c
  static V fnmadd(V a, V b, V c) { return c - a * b; }  // c - a*b
  static V load_fp16(const uint16_t* p) { return fp16_to_float(*p); }
  static void store_fp16(uint16_t* p, V x) { *p = float_to_fp16(x); }
  static V load_bf16(const uint16_t* p) { return bf16_to_float(*p); }
  static void store_bf16(uint16_t* p, V x) { *p = float_to_bf16(x); }
  static bool any_nan(V x) { return x != x; }
  static DAcc dacc_zero() { return 0.0; }
  static void dacc_add_squares(DAcc& acc, V x) { acc += static_cast<double>(x) * x; }
  static double dacc_sum(DAcc acc) { return acc; }
};

}  // namespace zero::kernels::detail
