// Run-time controls of the vectorized CPU kernels: which SIMD level they use (detected once,
// overridable for tests and benchmarks) and how many threads split one large buffer.
#pragma once

#include <cstdint>

namespace zero::kernels {

enum class SimdLevel { kScalar, kAvx2, kAvx512 };  // kAvx2 includes FMA and F16C

const char* simd_level_name(SimdLevel level);  // "scalar", "avx2", "avx512"

// The best level this CPU supports (__builtin_cpu_supports; kScalar off x86-64).
SimdLevel detected_simd_level();

// The level the _cpu kernels use now: detected_simd_level() unless the environment variable
// ZERO_CPU_SIMD (scalar|avx2|avx512) or set_simd_level() asked for a lower one.
SimdLevel simd_level();

// Throws UsageError when `level` is above detected_simd_level().
void set_simd_level(SimdLevel level);

// Threads that one _cpu kernel call may use for a large buffer (small ones run on the calling
// thread). Default: std::thread::hardware_concurrency(). Values < 1 throw UsageError.
void set_cpu_threads(int threads);
int cpu_threads();

// The memory floor of an Adam step: exactly its traffic (reads param, grad, exp_avg,
// exp_avg_sq; writes param, exp_avg, exp_avg_sq) with trivial arithmetic, vectorized and
// threaded like adam_step_cpu. A benchmark baseline, not an optimizer.
void adam_access_floor_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                           int64_t numel);

}  // namespace zero::kernels
