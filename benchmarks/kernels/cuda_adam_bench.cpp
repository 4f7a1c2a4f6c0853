// cuda_adam_bench: memory bandwidth of the fused multi-tensor CUDA Adam step
// (zero::kernels::cuda::launch_multi_tensor_adam) against a device-to-device cudaMemcpyAsync
// timed in the same run. Exits 77 when there is no CUDA device (ctest: skipped).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cuda.h>

#include "bench_args.h"

namespace {

using zero::tools::mixed_sizes;
using zero::tools::size_label;

using zero::kernels::cuda::AdamShard;
using zero::kernels::cuda::DType;

// Every CUDA runtime call goes through this: a failure names the call and the CUDA error.
#define BENCH_CUDA(call)                                                                       \
  do {                                                                                         \
    const cudaError_t bench_err_ = (call);                                                     \
    if (bench_err_ != cudaSuccess)                                                             \
      throw zero::CudaError(std::string(#call) + " failed at " __FILE__ ":" +                  \
                            std::to_string(__LINE__) + ": " + cudaGetErrorString(bench_err_)); \
  } while (0)

constexpr const char* kUsage =
    "usage: cuda_adam_bench [--json] [--flat NUMEL] [--mixed NUMEL] [--tensors COUNT]\n"
    "                       [--iters N] [--copy-bytes BYTES]\n"
    "  defaults: --flat 134217728 (128M) --mixed 67108864 (64M) --tensors 200 --iters 20\n"
    "            --copy-bytes 2147483648 (2 GiB copied: 4 GiB moved)";

struct Options {
  bool json = false;
  int64_t flat_numel = int64_t{128} << 20;
  int64_t mixed_numel = int64_t{64} << 20;
  int mixed_tensors = 200;
  int iters = 20;
  int64_t copy_bytes = int64_t{2} << 30;
};

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { BENCH_CUDA(cudaMalloc(&ptr_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* bytes() const { return static_cast<char*>(ptr_); }

 private:
  void* ptr_ = nullptr;
};

// Fills `bytes` of device memory with random data (never zeros): a 4 MiB random host block
// uploaded once and tiled with device-to-device copies. `kind` 0: fp32 values in [lo, hi);
// 1: bf16 values in [lo, hi).
void fill_random(char* dst, int64_t numel, int kind, float lo, float hi, uint32_t seed) {
  constexpr int64_t kBlockElems = int64_t{1} << 20;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  const size_t elem_bytes = kind == 0 ? 4 : 2;
  std::vector<char> host(static_cast<size_t>(kBlockElems) * elem_bytes);
  for (int64_t i = 0; i < kBlockElems; ++i) {
    const float f = dist(rng);
    if (kind == 0) {
      std::memcpy(host.data() + i * 4, &f, 4);
    } else {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      const uint16_t b = static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
      std::memcpy(host.data() + i * 2, &b, 2);
    }
  }
  const int64_t first = std::min(numel, kBlockElems);
  BENCH_CUDA(cudaMemcpy(dst, host.data(), static_cast<size_t>(first) * elem_bytes,
                        cudaMemcpyHostToDevice));
  for (int64_t done = first; done < numel;) {
    const int64_t n = std::min(done, numel - done);  // doubling copies
    BENCH_CUDA(cudaMemcpy(dst + done * elem_bytes, dst, static_cast<size_t>(n) * elem_bytes,
                          cudaMemcpyDeviceToDevice));
    done += n;
  }
}

// Median of `iters` event-timed runs of `fn` (after 3 untimed warm-up runs), in ms.
template <typename Fn>
double median_ms(int iters, cudaStream_t stream, Fn&& fn) {
  cudaEvent_t start, stop;
  BENCH_CUDA(cudaEventCreate(&start));
  BENCH_CUDA(cudaEventCreate(&stop));
  for (int i = 0; i < 3; ++i) fn();
  BENCH_CUDA(cudaStreamSynchronize(stream));
  std::vector<double> ms;
  for (int i = 0; i < iters; ++i) {
    BENCH_CUDA(cudaEventRecord(start, stream));
    fn();
    BENCH_CUDA(cudaEventRecord(stop, stream));
    BENCH_CUDA(cudaEventSynchronize(stop));
    float t = 0;
    BENCH_CUDA(cudaEventElapsedTime(&t, start, stop));
    ms.push_back(t);
  }
  BENCH_CUDA(cudaEventDestroy(start));
  BENCH_CUDA(cudaEventDestroy(stop));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

struct Variant {
  const char* name;
  DType grad_type;
  bool param16;  // write a bf16 parameter copy in the same pass
};

struct Row {
  std::string case_name, variant;
  int64_t numel = 0, tensors = 0, launches = 0, bytes_per_elem = 0;
  double ms = 0, gbps = 0, elems_per_s = 0, pct_of_copy = 0;
};

// One case (a list of shard sizes) x one variant: buffers laid out back to back, each shard
// starting at a multiple of 8 elements (16-byte aligned for every dtype), random contents.
Row run_case(const std::string& case_name, const std::vector<int64_t>& sizes, const Variant& v,
             int iters, double copy_gbps, cudaStream_t stream) {
  std::vector<int64_t> offsets;
  int64_t total = 0, numel = 0;
  for (int64_t n : sizes) {
    offsets.push_back(total);
    total += (n + 7) / 8 * 8;
    numel += n;
  }
  const size_t grad_bytes = zero::kernels::cuda::dtype_bytes(v.grad_type);
  DeviceBuffer param(total * 4), grad(total * grad_bytes), m(total * 4), vv(total * 4),
      p16(v.param16 ? total * 2 : 0);
  fill_random(param.bytes(), total, 0, -1.0f, 1.0f, 1);
  fill_random(grad.bytes(), total, v.grad_type == DType::kFp32 ? 0 : 1, -1e-2f, 1e-2f, 2);
  fill_random(m.bytes(), total, 0, -1e-3f, 1e-3f, 3);
  fill_random(vv.bytes(), total, 0, 1e-8f, 1e-6f, 4);
  if (v.param16) BENCH_CUDA(cudaMemset(p16.bytes(), 0xff, total * 2));  // poisoned (NaN)
  // The fills ran on the legacy stream, which the non-blocking bench stream does not wait for.
  BENCH_CUDA(cudaDeviceSynchronize());

  std::vector<AdamShard> shards;
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t o = offsets[i];
    shards.push_back({reinterpret_cast<float*>(param.bytes()) + o, grad.bytes() + o * grad_bytes,
                      reinterpret_cast<float*>(m.bytes()) + o,
                      reinterpret_cast<float*>(vv.bytes()) + o,
                      v.param16 ? static_cast<void*>(p16.bytes() + o * 2) : nullptr, sizes[i]});
  }
  zero::kernels::AdamParams p{};
  p.lr = 1e-4f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-8f;
  p.weight_decay = 0.01f;
  p.adamw_mode = true;
  p.step = 1;
  const double ms = median_ms(iters, stream, [&] {
    ++p.step;
    zero::kernels::cuda::launch_multi_tensor_adam(p, shards.data(), shards.size(), v.grad_type,
                                                  DType::kBf16, stream);
  });
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(stream));

  // The step really ran: the poisoned 16-bit copy is overwritten, the params stay finite.
  float first = NAN;
  BENCH_CUDA(cudaMemcpy(&first, param.bytes(), 4, cudaMemcpyDeviceToHost));
  ZERO_CHECK(std::isfinite(first), zero::InternalError, "Adam step produced a non-finite param");
  if (v.param16) {
    uint16_t bits = 0xffff;
    BENCH_CUDA(cudaMemcpy(&bits, p16.bytes(), 2, cudaMemcpyDeviceToHost));
    ZERO_CHECK(bits != 0xffff, zero::InternalError, "the bf16 parameter copy was not written");
  }

  Row r;
  r.case_name = case_name;
  r.variant = v.name;
  r.numel = numel;
  r.tensors = static_cast<int64_t>(sizes.size());
  r.launches = (r.tensors + zero::kernels::cuda::kMaxTensorsPerLaunch - 1) /
               zero::kernels::cuda::kMaxTensorsPerLaunch;
  // Read p, g, m, v; write p, m, v (+ the 16-bit parameter copy).
  r.bytes_per_elem = 4 + static_cast<int64_t>(grad_bytes) + 8 + 12 + (v.param16 ? 2 : 0);
  r.ms = ms;
  r.gbps = static_cast<double>(r.bytes_per_elem * numel) / (ms * 1e-3) / 1e9;
  r.elems_per_s = static_cast<double>(numel) / (ms * 1e-3);
  r.pct_of_copy = 100.0 * r.gbps / copy_gbps;
  return r;
}

// cudaMemcpyAsync device to device of `bytes`: GB/s counting bytes read plus bytes written.
double copy_bandwidth(int64_t bytes, int iters, cudaStream_t stream, double* ms_out) {
  DeviceBuffer src(bytes), dst(bytes);
  fill_random(src.bytes(), bytes / 4, 0, -1.0f, 1.0f, 5);
  const double ms = median_ms(iters, stream, [&] {
    BENCH_CUDA(cudaMemcpyAsync(dst.bytes(), src.bytes(), bytes, cudaMemcpyDeviceToDevice, stream));
  });
  *ms_out = ms;
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

int64_t parse_count(const std::string& flag, const char* value) {
  char* end = nullptr;
  const long long v = std::strtoll(value, &end, 10);
  ZERO_CHECK(end && *end == '\0' && v > 0, zero::UsageError, flag, ": '", value,
             "' is not a positive count\n", kUsage);
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      ZERO_CHECK(i + 1 < argc, zero::UsageError, a, ": missing value\n", kUsage);
      return argv[++i];
    };
    if (a == "--json")
      o.json = true;
    else if (a == "--flat")
      o.flat_numel = parse_count(a, next());
    else if (a == "--mixed")
      o.mixed_numel = parse_count(a, next());
    else if (a == "--tensors")
      o.mixed_tensors = static_cast<int>(parse_count(a, next()));
    else if (a == "--iters")
      o.iters = static_cast<int>(parse_count(a, next()));
    else if (a == "--copy-bytes")
      o.copy_bytes = parse_count(a, next()) / 4 * 4;
    else
      throw zero::UsageError("unknown argument '" + a + "'\n" + kUsage);
  }
  return o;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::fprintf(stderr, "cuda_adam_bench: no CUDA device (%s): skipped\n",
                 err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  cudaDeviceProp prop{};
  BENCH_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t stream;
  BENCH_CUDA(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));

  double copy_ms = 0;
  const double copy_gbps = copy_bandwidth(o.copy_bytes, o.iters, stream, &copy_ms);
  const Variant variants[] = {{"fp32_grad", DType::kFp32, false},
                              {"bf16_grad+bf16_param", DType::kBf16, true}};
  const std::vector<std::pair<std::string, std::vector<int64_t>>> cases = {
      {"flat" + size_label(o.flat_numel), {o.flat_numel}},
      {"mixed" + std::to_string(o.mixed_tensors) + "x" + size_label(o.mixed_numel),
       mixed_sizes(o.mixed_numel, o.mixed_tensors)}};
  std::vector<Row> rows;
  for (const auto& c : cases)
    for (const Variant& v : variants)
      rows.push_back(run_case(c.first, c.second, v, o.iters, copy_gbps, stream));
  BENCH_CUDA(cudaStreamDestroy(stream));

  if (o.json) {
    std::printf(
        "{\"device\": \"%s\", \"copy\": {\"bytes\": %lld, \"ms\": %.4f, \"gbps\": %.1f}, "
        "\"cases\": [",
        prop.name, static_cast<long long>(o.copy_bytes), copy_ms, copy_gbps);
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      std::printf(
          "%s{\"case\": \"%s\", \"variant\": \"%s\", \"numel\": %lld, \"tensors\": %lld, "
          "\"launches\": %lld, \"bytes_per_elem\": %lld, \"ms\": %.4f, \"gbps\": %.1f, "
          "\"elems_per_s\": %.4e, \"pct_of_copy\": %.1f}",
          i ? ", " : "", r.case_name.c_str(), r.variant.c_str(), static_cast<long long>(r.numel),
          static_cast<long long>(r.tensors), static_cast<long long>(r.launches),
          static_cast<long long>(r.bytes_per_elem), r.ms, r.gbps, r.elems_per_s, r.pct_of_copy);
    }
    std::printf("]}\n");
    return 0;
  }
  std::printf(
      "fused CUDA Adam on %s, median of %d runs; copy: cudaMemcpyAsync D2D of %.2f GiB "
      "= %.1f GB/s (read + write)\n",
      prop.name, o.iters, static_cast<double>(o.copy_bytes) / (1 << 30), copy_gbps);
  std::printf("%-16s %-22s %8s %6s %8s %10s %14s %8s\n", "case", "variant", "launches", "B/el",
              "ms", "GB/s", "elems/s", "of copy");
  for (const Row& r : rows)
    std::printf("%-16s %-22s %8lld %6lld %8.3f %10.1f %14.3e %7.1f%%\n", r.case_name.c_str(),
                r.variant.c_str(), static_cast<long long>(r.launches),
                static_cast<long long>(r.bytes_per_elem), r.ms, r.gbps, r.elems_per_s,
                r.pct_of_copy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const zero::UsageError& e) {
    std::fprintf(stderr, "cuda_adam_bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_adam_bench: error: %s\n", e.what());
    return 1;
  }
}
