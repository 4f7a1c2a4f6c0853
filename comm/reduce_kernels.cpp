// Reduction kernels for the Gloo backend: plain loops the compiler vectorizes, plus an F16C
// path for fp16 picked at run time (one binary for any x86-64).
#include "reduce_kernels.h"

#include <zero/error.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zero::detail {
namespace {

struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    return a + b;
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    return a < b ? b : a;
  }
};

template <typename T, typename Op>
void reduce_plain(void* out, const void* a, const void* b, size_t n) {
  T* o = static_cast<T*>(out);
  const T* x = static_cast<const T*>(a);
  const T* y = static_cast<const T*>(b);
  for (size_t i = 0; i < n; ++i) o[i] = Op::apply(x[i], y[i]);
}

inline float bf16_to_float(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t float_to_bf16(float f) {  // round to nearest even, NaN stays NaN
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (f != f) return 0x7fc0;
  return static_cast<uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
}

template <typename Op>
void reduce_bf16(void* out, const void* a, const void* b, size_t n) {
  uint16_t* o = static_cast<uint16_t*>(out);
  const uint16_t* x = static_cast<const uint16_t*>(a);
  const uint16_t* y = static_cast<const uint16_t*>(b);
  for (size_t i = 0; i < n; ++i)
    o[i] = float_to_bf16(Op::apply(bf16_to_float(x[i]), bf16_to_float(y[i])));
}

template <typename Op>
void reduce_half_scalar(void* out, const void* a, const void* b, size_t n, size_t start) {
  c10::Half* o = static_cast<c10::Half*>(out);
  const c10::Half* x = static_cast<const c10::Half*>(a);
  const c10::Half* y = static_cast<const c10::Half*>(b);
  for (size_t i = start; i < n; ++i) o[i] = c10::Half(Op::apply(float(x[i]), float(y[i])));
}

#if defined(__x86_64__)
template <typename Op>
__attribute__((target("avx2,f16c"))) void reduce_half_f16c(void* out, const void* a, const void* b,
                                                           size_t n) {
  auto* o = static_cast<uint16_t*>(out);
  auto* x = static_cast<const uint16_t*>(a);
  auto* y = static_cast<const uint16_t*>(b);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 fx = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256 fy = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(y + i)));
    __m256 r;
    if constexpr (std::is_same_v<Op, Sum>) {
      r = _mm256_add_ps(fx, fy);
    } else {
      r = _mm256_max_ps(fy, fx);  // NaN in either -> fx, as the scalar a < b ? b : a
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i),
                     _mm256_cvtps_ph(r, _MM_FROUND_TO_NEAREST_INT));
  }
  reduce_half_scalar<Op>(out, a, b, n, i);
}
#endif

template <typename Op>
void reduce_half(void* out, const void* a, const void* b, size_t n) {
#if defined(__x86_64__)
  // clang has no "f16c" name for __builtin_cpu_supports; every AVX2 CPU has F16C.
  static const bool has_f16c = __builtin_cpu_supports("avx2");
  if (has_f16c) return reduce_half_f16c<Op>(out, a, b, n);
#endif
  reduce_half_scalar<Op>(out, a, b, n, 0);
}

template <typename Op>
ReduceFn pick(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return &reduce_plain<float, Op>;
    case at::kChar:  // qwZ's quantized weights are only gathered; a sum wraps around
      return &reduce_plain<int8_t, Op>;
    case at::kInt:
      return &reduce_plain<int32_t, Op>;
    case at::kLong:
      return &reduce_plain<int64_t, Op>;
    case at::kHalf:
      return &reduce_half<Op>;
    case at::kBFloat16:
      return &reduce_bf16<Op>;
    default:
      break;
  }
  check_supported_dtype(dtype, "reduction");
  return nullptr;
}

template <typename T>
void divide_plain(T* p, size_t n, int d) {
  for (size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / static_cast<T>(d));
}

}  // namespace

void check_supported_dtype(at::ScalarType dtype, const char* what) {
  ZERO_CHECK(dtype == at::kFloat || dtype == at::kHalf || dtype == at::kBFloat16 ||
                 dtype == at::kChar || dtype == at::kInt || dtype == at::kLong,
             UsageError, what, ": unsupported dtype ", c10::toString(dtype),
             " (supported: float32, float16, bfloat16, int8, int32, int64)");
}

size_t dtype_bytes(at::ScalarType dtype) {
  check_supported_dtype(dtype, "collective");
  return c10::elementSize(dtype);
}

ReduceFn reduce_fn(at::ScalarType dtype, ReduceOp op) {
  return op == ReduceOp::kMax ? pick<Max>(dtype) : pick<Sum>(dtype);
}

void divide_inplace(void* data, size_t n, at::ScalarType dtype, int divisor) {
  switch (dtype) {
    case at::kFloat:
      return divide_plain(static_cast<float*>(data), n, divisor);
    case at::kInt:
      return divide_plain(static_cast<int32_t*>(data), n, divisor);
    case at::kLong:
      return divide_plain(static_cast<int64_t*>(data), n, divisor);
    case at::kHalf: {
      auto* p = static_cast<c10::Half*>(data);
      for (size_t i = 0; i < n; ++i) p[i] = c10::Half(float(p[i]) / static_cast<float>(divisor));
      return;
    }
    case at::kBFloat16: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < n; ++i)
        p[i] = float_to_bf16(bf16_to_float(p[i]) / static_cast<float>(divisor));
      return;
    }
    default:
      check_supported_dtype(dtype, "average");
  }
}

}  // namespace zero::detail
