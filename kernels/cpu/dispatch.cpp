// The public vectorized CPU kernels: pick the SIMD level's KernelTable at run time, split
// large buffers over cpu_threads() threads, and combine per-chunk results.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cpu.h>
#include <zero/kernels/math.h>
#include <zero/kernels/multi_tensor.h>

#include "kernel_table.h"
#include "parallel.h"

namespace zero::kernels {
namespace {

SimdLevel detect() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
      __builtin_cpu_supports("fma")) {
    return SimdLevel::kAvx512;
  }
  // F16C has no __builtin_cpu_supports name in every compiler; every AVX2 CPU has it.
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SimdLevel::kAvx2;
#endif
  return SimdLevel::kScalar;
}

SimdLevel level_from_env(SimdLevel detected) {
  const char* env = std::getenv("ZERO_CPU_SIMD");
  if (env == nullptr || *env == '\0') return detected;
  SimdLevel wanted = detected;
  if (!std::strcmp(env, "scalar"))
    wanted = SimdLevel::kScalar;
  else if (!std::strcmp(env, "avx2"))
    wanted = SimdLevel::kAvx2;
  else if (!std::strcmp(env, "avx512"))
    wanted = SimdLevel::kAvx512;
  else
    throw UsageError(
        ::zero::detail::str("ZERO_CPU_SIMD=", env, ": expected scalar, avx2 or avx512"));
  return std::min(wanted, detected);
}

std::atomic<int>& level_override() {  // -1: not set yet
  static std::atomic<int> level{-1};
  return level;
}

std::atomic<int>& threads_setting() {
  static std::atomic<int> threads{
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()))};
  return threads;
}

const detail::KernelTable& table() {
  switch (simd_level()) {
#if defined(__x86_64__)
    case SimdLevel::kAvx512:
      return detail::avx512_kernel_table();
    case SimdLevel::kAvx2:
      return detail::avx2_kernel_table();
#endif
    default:
      return detail::scalar_kernel_table();
  }
}

int kind_of(Half16 t) {
  return t == Half16::kFp16 ? detail::kElemF16 : detail::kElemBf16;
}

void check_numel(int64_t numel, const char* what) {
  ZERO_CHECK(numel >= 0, UsageError, what, ": numel must be >= 0, got ", numel);
}

void check_scale(float scale, const char* what) {
  ZERO_CHECK(std::isfinite(scale) && scale > 0.0f, UsageError, what,
             ": scale must be finite and > 0, got ", scale);
}

void run_adam(const AdamParams& p, float* param, const void* grad, int grad_kind, float* m,
              float* v, uint16_t* out16, Half16 out_type, int64_t numel, const char* what) {
  check_numel(numel, what);
  ZERO_CHECK(numel == 0 || (param && grad && m && v), UsageError, what, ": null buffer");
  const detail::AdamScalars s = detail::make_adam_scalars(p);
  const int out_kind = out16 ? kind_of(out_type) : detail::kElemNone;
  const detail::AdamFn fn = table().adam[grad_kind][out_kind];
  const detail::AdamArgs args{param, grad, m, v, out16};
  detail::parallel_for(numel, cpu_threads(),
                       [&](int, int64_t begin, int64_t end) { fn(s, args, begin, end); });
}

// Runs a range kernel returning bool over chunks; true when any chunk returned true.
template <typename Fn>
bool any_over_chunks(int64_t numel, Fn&& fn) {
  std::atomic<bool> any{false};
  detail::parallel_for(numel, cpu_threads(), [&](int, int64_t begin, int64_t end) {
    if (fn(begin, end)) any.store(true, std::memory_order_relaxed);
  });
  return any.load();
}

template <typename Fn>
double sum_over_chunks(int64_t numel, Fn&& fn) {
  std::vector<double> partial(
      static_cast<size_t>(detail::parallel_chunk_count(numel, cpu_threads())), 0.0);
  detail::parallel_for(numel, cpu_threads(),
                       [&](int c, int64_t begin, int64_t end) { partial[c] = fn(begin, end); });
  double sum = 0.0;
  for (double x : partial) sum += x;
  return sum;
}

}  // namespace

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::kAvx512:
      return "avx512";
    case SimdLevel::kAvx2:
      return "avx2";
    default:
      return "scalar";
  }
}

SimdLevel detected_simd_level() {
  static const SimdLevel detected = detect();
  return detected;
}

SimdLevel simd_level() {
  int level = level_override().load(std::memory_order_relaxed);
  if (level < 0) {
    int expected = -1;
    level = static_cast<int>(level_from_env(detected_simd_level()));
    if (!level_override().compare_exchange_strong(expected, level)) level = expected;
  }
  return static_cast<SimdLevel>(level);
}

void set_simd_level(SimdLevel level) {
  ZERO_CHECK(level <= detected_simd_level(), UsageError, "set_simd_level(", simd_level_name(level),
             "): this CPU supports at most ", simd_level_name(detected_simd_level()));
  level_override().store(static_cast<int>(level));
}

void set_cpu_threads(int threads) {
  ZERO_CHECK(threads >= 1, UsageError, "set_cpu_threads(", threads, "): must be >= 1");
  threads_setting().store(threads);
}

int cpu_threads() {
  return threads_setting().load(std::memory_order_relaxed);
}

void adam_access_floor_cpu(float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                           int64_t numel) {
  check_numel(numel, "adam_access_floor_cpu");
  const detail::FloorFn fn = table().access_floor;
  const detail::AdamArgs args{param, grad, exp_avg, exp_avg_sq, nullptr};
  detail::parallel_for(numel, cpu_threads(),
                       [&](int, int64_t begin, int64_t end) { fn(args, begin, end); });
}

void adam_step_cpu(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                   float* exp_avg_sq, int64_t numel) {
  run_adam(p, param, grad, detail::kElemF32, exp_avg, exp_avg_sq, nullptr, Half16::kFp16, numel,
           "adam_step_cpu");
}

void adam_step_cpu_mixed(const AdamParams& p, float* param, const uint16_t* grad16,
                         Half16 grad_type, float* exp_avg, float* exp_avg_sq, uint16_t* out_param16,
                         Half16 out_type, int64_t numel) {
  run_adam(p, param, grad16, kind_of(grad_type), exp_avg, exp_avg_sq, out_param16, out_type, numel,
           "adam_step_cpu_mixed");
}

void adam_step_cpu_fp32_grad(const AdamParams& p, float* param, const float* grad, float* exp_avg,
                             float* exp_avg_sq, uint16_t* out_param16, Half16 out_type,
                             int64_t numel) {
  run_adam(p, param, grad, detail::kElemF32, exp_avg, exp_avg_sq, out_param16, out_type, numel,
           "adam_step_cpu_fp32_grad");
}

void multi_tensor_adam_cpu(const AdamParams& p, const AdamShard* shards, size_t count,
                           DType grad_type, DType param16_type) {
  const bool any16 =
      std::any_of(shards, shards + count, [](const AdamShard& s) { return s.param16; });
  ZERO_CHECK(!any16 || param16_type != DType::kFp32, UsageError,
             "multi_tensor_adam_cpu: param16_type must be fp16 or bf16");
  const Half16 out_type = param16_type == DType::kFp16 ? Half16::kFp16 : Half16::kBf16;
  const int grad_kind = grad_type == DType::kFp32   ? detail::kElemF32
                        : grad_type == DType::kFp16 ? detail::kElemF16
                                                    : detail::kElemBf16;
  for (size_t i = 0; i < count; ++i) {
    const AdamShard& s = shards[i];
    run_adam(p, s.param, s.grad, grad_kind, s.exp_avg, s.exp_avg_sq,
             static_cast<uint16_t*>(s.param16), out_type, s.numel, "multi_tensor_adam_cpu");
  }
}

bool unscale_cpu(float* data, int64_t numel, float scale) {
  check_numel(numel, "unscale_cpu");
  check_scale(scale, "unscale_cpu");
  const float inv = 1.0f / scale;
  const detail::UnscaleFn fn = table().unscale[detail::kElemF32];
  return any_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(data, data, inv, b, e); });
}

bool unscale_to_fp32_cpu(const uint16_t* in16, Half16 in_type, float* out, int64_t numel,
                         float scale) {
  check_numel(numel, "unscale_to_fp32_cpu");
  check_scale(scale, "unscale_to_fp32_cpu");
  const float inv = 1.0f / scale;
  const detail::UnscaleFn fn = table().unscale[kind_of(in_type)];
  return any_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(in16, out, inv, b, e); });
}

bool has_non_finite_cpu(const float* data, int64_t numel) {
  check_numel(numel, "has_non_finite_cpu");
  const detail::NonFiniteFn fn = table().non_finite[detail::kElemF32];
  return any_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(data, b, e); });
}

bool has_non_finite_cpu(const uint16_t* data16, Half16 type, int64_t numel) {
  check_numel(numel, "has_non_finite_cpu");
  const detail::NonFiniteFn fn = table().non_finite[kind_of(type)];
  return any_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(data16, b, e); });
}

double sum_squares_cpu(const float* data, int64_t numel) {
  check_numel(numel, "sum_squares_cpu");
  const detail::SumSquaresFn fn = table().sum_squares[detail::kElemF32];
  return sum_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(data, b, e); });
}

double sum_squares_cpu(const uint16_t* data16, Half16 type, int64_t numel) {
  check_numel(numel, "sum_squares_cpu");
  const detail::SumSquaresFn fn = table().sum_squares[kind_of(type)];
  return sum_over_chunks(numel, [&](int64_t b, int64_t e) { return fn(data16, b, e); });
}

void scale_cpu(float* data, int64_t numel, float factor) {
  check_numel(numel, "scale_cpu");
  const detail::ScaleFn fn = table().scale;
  detail::parallel_for(numel, cpu_threads(),
                       [&](int, int64_t b, int64_t e) { fn(data, factor, b, e); });
}

void cast_to_half16_cpu(const float* in, uint16_t* out, Half16 out_type, int64_t numel) {
  check_numel(numel, "cast_to_half16_cpu");
  const detail::CastFn fn = table().to_half16[kind_of(out_type)];
  detail::parallel_for(numel, cpu_threads(), [&](int, int64_t b, int64_t e) { fn(in, out, b, e); });
}

void cast_from_half16_cpu(const uint16_t* in, Half16 in_type, float* out, int64_t numel) {
  check_numel(numel, "cast_from_half16_cpu");
  const detail::CastFn fn = table().from_half16[kind_of(in_type)];
  detail::parallel_for(numel, cpu_threads(), [&](int, int64_t b, int64_t e) { fn(in, out, b, e); });
}

}  // namespace zero::kernels
