// qwZ's quantize / dequantize on the CPU (quantize.h): AVX2 (with F16C) where the CPU has it
// and simd_level() allows it, the references otherwise; the blocks split over the kernels'
// threads. Both produce the references' bits: the same float products, rounding to nearest even
// (cvtps_epi32 under the default MXCSR, as lrint), the same clamp, F16C's round-to-nearest-even.
#include <zero/kernels/cpu.h>
#include <zero/kernels/quantize.h>

#include <zero/error.h>

#include <algorithm>
#include <cmath>

#include "parallel.h"
#include "simd.h"

namespace zero::kernels {
namespace {

// The scale of a group whose largest magnitude is `max` (the reference's expression).
inline float scale_of(float max) {
  return max == 0 ? 1.0f : 256.0f / (2 * max);
}

#if ZERO_SIMD_X86
ZERO_SIMD_BEGIN(ZERO_SIMD_ISA_AVX2)

// One group of `size` elements (a multiple of 8).
void quantize_group_avx2(const uint16_t* x, int64_t size, int8_t* q, float* inv_scale) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  __m256 m = _mm256_setzero_ps();
  for (int64_t i = 0; i < size; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    m = _mm256_max_ps(m, _mm256_and_ps(v, abs_mask));
  }
  __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
  const float scale = scale_of(_mm_cvtss_f32(m4));
  const __m256 s = _mm256_set1_ps(scale);
  const __m256i lo = _mm256_set1_epi32(-128), hi = _mm256_set1_epi32(127);
  for (int64_t i = 0; i < size; i += 8) {
    const __m256 v = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + i)));
    __m256i r = _mm256_cvtps_epi32(_mm256_mul_ps(v, s));
    r = _mm256_min_epi32(_mm256_max_epi32(r, lo), hi);
    const __m128i r16 = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(r16, r16));
  }
  *inv_scale = 1 / scale;
}

void dequantize_group_avx2(const int8_t* q, float inv_scale, int64_t size, uint16_t* out) {
  const __m256 s = _mm256_set1_ps(inv_scale);
  for (int64_t i = 0; i < size; i += 8) {
    const __m256i r =
        _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i)));
    const __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(r), s);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
}

ZERO_SIMD_END
#endif

bool use_avx2(int64_t size) {
#if ZERO_SIMD_X86
  return size % 8 == 0 && simd_level() != SimdLevel::kScalar;
#else
  (void)size;
  return false;
#endif
}

void check_groups(int64_t numel, int64_t groups) {
  ZERO_CHECK(groups > 0 && numel % groups == 0, UsageError, "qwZ: ", numel, " elements in ", groups,
             " groups");
}

// Every group of numel / groups values, split by elements over the kernels' threads (a block
// [begin, end) of elements takes the groups that start in it): vector(g, size) for each group where
// AVX2 may run, else reference(first, last, size) over a thread's run of groups.
template <class Vector, class Reference>
void for_groups(int64_t numel, int64_t groups, Vector&& vector, Reference&& reference) {
  check_groups(numel, groups);
  const int64_t size = numel / groups;
  const bool vec = use_avx2(size);
  detail::parallel_for(numel, cpu_threads(), [&](int, int64_t begin, int64_t end) {
    const int64_t first = (begin + size - 1) / size, last = (end + size - 1) / size;
    if (first >= last) return;
    if (vec)
      for (int64_t g = first; g < last; ++g) vector(g, size);
    else
      reference(first, last, size);
  });
}

}  // namespace

void quantize_int8_symmetric_cpu(const uint16_t* in_fp16, int64_t numel, int64_t groups, int8_t* q,
                                 float* inv_scales) {
  for_groups(
      numel, groups,
      [&](int64_t g, int64_t size) {
#if ZERO_SIMD_X86
        quantize_group_avx2(in_fp16 + g * size, size, q + g * size, inv_scales + g);
#endif
      },
      [&](int64_t first, int64_t last, int64_t size) {
        quantize_int8_symmetric_reference(in_fp16 + first * size, (last - first) * size,
                                          last - first, q + first * size, inv_scales + first);
      });
}

void dequantize_int8_symmetric_cpu(const int8_t* q, const float* inv_scales, int64_t numel,
                                   int64_t groups, uint16_t* out_fp16) {
  for_groups(
      numel, groups,
      [&](int64_t g, int64_t size) {
#if ZERO_SIMD_X86
        dequantize_group_avx2(q + g * size, inv_scales[g], size, out_fp16 + g * size);
#endif
      },
      [&](int64_t first, int64_t last, int64_t size) {
        dequantize_int8_symmetric_reference(q + first * size, inv_scales + first,
                                            (last - first) * size, last - first,
                                            out_fp16 + first * size);
      });
}

}  // namespace zero::kernels
