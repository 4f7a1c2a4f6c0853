// Every CUDA kernel against the scalar reference (the CPU twin's oracle) on random non-zero
// data, NaN-poisoned outputs, odd lengths, misaligned shards and lists longer than one launch.
// Exits 77 (ctest: skipped) when no CUDA device is present.
#include <cuda_runtime_api.h>
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cuda.h>
#include <zero/kernels/math.h>
#include <zero/kernels/quantize.h>

#include "kernel_test_util.h"

using namespace zero::kernels;
using namespace zero::kernels::test;
using zero::kernels::cuda::DType;

namespace {

[[maybe_unused]] const int kDeviceCheck = [] {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no CUDA device: skipping the CUDA kernel tests\n");
    std::exit(77);
  }
  return count;
}();

void check_cuda(cudaError_t err, const char* what) {
  if (err != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(err));
}

// A device buffer poisoned with 0xff bytes (NaN in fp32, fp16 and bf16).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    check_cuda(cudaMalloc(&ptr_, bytes ? bytes : 1), "cudaMalloc");
    check_cuda(cudaMemset(ptr_, 0xff, bytes ? bytes : 1), "cudaMemset");
  }
  ~DeviceBuffer() { cudaFree(ptr_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as(size_t offset_elems = 0) const {
    return static_cast<T*>(ptr_) + offset_elems;
  }
  void* raw() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_;
};

template <typename T>
std::unique_ptr<DeviceBuffer> upload(const std::vector<T>& host, size_t offset_elems = 0) {
  auto buf = std::make_unique<DeviceBuffer>((host.size() + offset_elems) * sizeof(T));
  check_cuda(cudaMemcpy(buf->template as<T>(offset_elems), host.data(), host.size() * sizeof(T),
                        cudaMemcpyHostToDevice),
             "cudaMemcpy H2D");
  return buf;
}

template <typename T>
std::vector<T> download(const T* device, size_t n) {
  std::vector<T> host(n);
  check_cuda(cudaMemcpy(host.data(), device, n * sizeof(T), cudaMemcpyDeviceToHost),
             "cudaMemcpy D2H");
  return host;
}

Half16 half_of(DType t) {
  return t == DType::kFp16 ? Half16::kFp16 : Half16::kBf16;
}

struct HostShard {
  std::vector<float> p, g, m, v;
  std::vector<uint16_t> g16;
  size_t offset;  // elements of misalignment in device memory
};

}  // namespace

TEST_CASE("multi-tensor Adam on CUDA matches the reference", "[kernels][cuda][adam]") {
  // Odd lengths, one misaligned shard, and enough shards for two launches.
  std::vector<int64_t> lengths(kOddLengths, kOddLengths + 5);
  for (int i = 0; i < 36; ++i) lengths.push_back(100 + 37 * i);
  for (DType grad_type : {DType::kFp32, DType::kFp16, DType::kBf16})
    for (int out_kind : {-1, 0, 1})
      for (bool adamw : {false, true})
        for (bool bias_correction : {false, true}) {
          const DType out_type = out_kind == 1 ? DType::kBf16 : DType::kFp16;
          const float grad_scale = grad_type == DType::kFp16 ? 8.0f : (adamw ? 1.0f : 1024.0f);
          INFO("grad " << cuda::dtype_name(grad_type) << " out_kind " << out_kind << " adamw "
                       << adamw << " bias_correction " << bias_correction);
          std::vector<HostShard> host;
          std::vector<std::unique_ptr<DeviceBuffer>> keep;
          std::vector<cuda::AdamShard> shards;
          for (size_t s = 0; s < lengths.size(); ++s) {
            const int64_t n = lengths[s];
            HostShard h;
            h.offset = s == 2 ? 1 : 0;  // the 15-element shard starts misaligned
            h.p = cached_floats(n, 1);
            h.m = cached_floats(n, 2, 0.001f, 0.1f);
            h.v = random_positive(n, 3, 1e-6f, 1e-2f);
            h.g = cached_floats(n, 4, 0.001f, 1.0f);
            for (float& x : h.g) x *= grad_scale;
            if (grad_type != DType::kFp32) h.g16 = to_half16(h.g, half_of(grad_type));
            keep.push_back(upload(h.p, h.offset));
            float* p = keep.back()->as<float>(h.offset);
            keep.push_back(grad_type == DType::kFp32 ? upload(h.g, h.offset)
                                                     : upload(h.g16, h.offset));
            const void* g = grad_type == DType::kFp32
                                ? static_cast<const void*>(keep.back()->as<float>(h.offset))
                                : static_cast<const void*>(keep.back()->as<uint16_t>(h.offset));
            keep.push_back(upload(h.m, h.offset));
            float* m = keep.back()->as<float>(h.offset);
            keep.push_back(upload(h.v, h.offset));
            float* v = keep.back()->as<float>(h.offset);
            void* out = nullptr;
            if (out_kind >= 0) {
              keep.push_back(std::make_unique<DeviceBuffer>((n + h.offset) * 2));
              out = keep.back()->as<uint16_t>(h.offset);
            }
            shards.push_back({p, g, m, v, out, n});
            host.push_back(std::move(h));
          }
          AdamParams prm{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f, adamw, bias_correction, 3, grad_scale};
          cuda::launch_multi_tensor_adam(prm, shards.data(), shards.size(), grad_type, out_type,
                                         nullptr);
          check_cuda(cudaDeviceSynchronize(), "adam kernel");
          for (size_t s = 0; s < shards.size(); ++s) {
            HostShard& h = host[s];
            const int64_t n = lengths[s];
            INFO("shard " << s << " n=" << n);
            std::vector<uint16_t> out_ref(static_cast<size_t>(n));
            if (grad_type == DType::kFp32) {
              adam_step_reference_fp32_grad(prm, h.p.data(), h.g.data(), h.m.data(), h.v.data(),
                                            out_kind >= 0 ? out_ref.data() : nullptr,
                                            half_of(out_type), n);
            } else {
              adam_step_reference_mixed(
                  prm, h.p.data(), h.g16.data(), half_of(grad_type), h.m.data(), h.v.data(),
                  out_kind >= 0 ? out_ref.data() : nullptr, half_of(out_type), n);
            }
            const std::vector<float> p = download(shards[s].param, n);
            const std::vector<float> m = download(shards[s].exp_avg, n);
            const std::vector<float> v = download(shards[s].exp_avg_sq, n);
            CHECK(compare(p, h.p, 2e-6, 1e-12) == "");
            CHECK(compare(m, h.m, 2e-6, scaled_atol(h.m, 1e-6)) == "");
            CHECK(compare(v, h.v, 2e-6, 1e-12) == "");
            if (out_kind >= 0) {
              const std::vector<uint16_t> out =
                  download(static_cast<const uint16_t*>(shards[s].param16), n);
              CHECK(compare_bits(out, to_half16(p, half_of(out_type))) == "");
            }
          }
        }
}

TEST_CASE("CUDA unscale, non-finite check, casts and scale match the reference",
          "[kernels][cuda][math]") {
  const float inf = std::numeric_limits<float>::infinity();
  DeviceBuffer flag(sizeof(int));
  for (int64_t n : kOddLengths) {
    INFO("n=" << n);
    const std::vector<float>& x = cached_floats(n, 7, 0.01f, 100.0f);
    for (DType in_type : {DType::kFp32, DType::kFp16, DType::kBf16}) {
      INFO(cuda::dtype_name(in_type));
      std::vector<float> ref(static_cast<size_t>(n));
      std::unique_ptr<DeviceBuffer> in;
      if (in_type == DType::kFp32) {
        in = upload(x);
        ref = x;
        unscale_reference(ref.data(), n, 256.0f);
      } else {
        const std::vector<uint16_t> h = to_half16(x, half_of(in_type));
        in = upload(h);
        unscale_to_fp32_reference(h.data(), half_of(in_type), ref.data(), n, 256.0f);
      }
      DeviceBuffer out(n * sizeof(float));
      check_cuda(cudaMemset(flag.as<int>(), 0, sizeof(int)), "memset");
      cuda::launch_unscale_check(in->raw(), in_type, out.as<float>(), n, 256.0f, flag.as<int>(),
                                 nullptr);
      CHECK(compare(download(out.as<float>(), n), ref, 0.0, 0.0) == "");
      CHECK(download(flag.as<int>(), 1)[0] == 0);
      // One bad value at the head, in the body, in the 4-element tail: found each time.
      for (int64_t pos : {int64_t{0}, n / 2, n - 1}) {
        for (float bad : {inf, std::nanf("")}) {
          INFO("pos " << pos << " value " << bad);
          std::vector<float> xb = x;
          xb[pos] = bad;
          std::unique_ptr<DeviceBuffer> inb =
              in_type == DType::kFp32 ? upload(xb) : upload(to_half16(xb, half_of(in_type)));
          check_cuda(cudaMemset(flag.as<int>(), 0, sizeof(int)), "memset");
          cuda::launch_non_finite_check(inb->raw(), in_type, n, flag.as<int>(), nullptr);
          CHECK(download(flag.as<int>(), 1)[0] == 1);
          check_cuda(cudaMemset(flag.as<int>(), 0, sizeof(int)), "memset");
          cuda::launch_unscale_check(inb->raw(), in_type, out.as<float>(), n, 2.0f, flag.as<int>(),
                                     nullptr);
          CHECK(download(flag.as<int>(), 1)[0] == 1);
        }
      }
    }
    for (DType t : {DType::kFp16, DType::kBf16}) {
      INFO("cast " << cuda::dtype_name(t));
      std::unique_ptr<DeviceBuffer> in = upload(x);
      DeviceBuffer h(n * 2);
      cuda::launch_cast(in->raw(), DType::kFp32, h.raw(), t, n, nullptr);
      std::vector<uint16_t> ref(static_cast<size_t>(n));
      cast_to_half16_reference(x.data(), ref.data(), half_of(t), n);
      CHECK(compare_bits(download(h.as<uint16_t>(), n), ref) == "");
      DeviceBuffer back(n * sizeof(float));
      cuda::launch_cast(h.raw(), t, back.raw(), DType::kFp32, n, nullptr);
      std::vector<float> back_ref(static_cast<size_t>(n));
      cast_from_half16_reference(ref.data(), half_of(t), back_ref.data(), n);
      CHECK(compare(download(back.as<float>(), n), back_ref, 0.0, 0.0) == "");
    }
    std::unique_ptr<DeviceBuffer> s = upload(x);
    cuda::launch_scale(s->as<float>(), n, 0.37f, nullptr);
    std::vector<float> sref = x;
    scale_reference(sref.data(), n, 0.37f);
    CHECK(compare(download(s->as<float>(), n), sref, 0.0, 0.0) == "");
  }
  check_cuda(cudaDeviceSynchronize(), "math kernels");
}

TEST_CASE("CUDA multi-tensor sum of squares matches the reference", "[kernels][cuda][math]") {
  std::vector<int64_t> lengths(kOddLengths, kOddLengths + 5);
  for (int i = 0; i < 40; ++i) lengths.push_back(1 + 101 * i);  // two launches
  DeviceBuffer workspace(cuda::kSumSquaresWorkspaceNumel * sizeof(double));
  DeviceBuffer out(sizeof(double));
  for (DType t : {DType::kFp32, DType::kFp16, DType::kBf16}) {
    INFO(cuda::dtype_name(t));
    std::vector<std::unique_ptr<DeviceBuffer>> keep;
    std::vector<cuda::ConstBuffer> buffers;
    double ref = 0.0;
    for (size_t i = 0; i < lengths.size(); ++i) {
      const std::vector<float>& x = cached_floats(lengths[i], 20 + static_cast<uint32_t>(i));
      if (t == DType::kFp32) {
        keep.push_back(upload(x));
        ref += sum_squares_reference(x.data(), lengths[i]);
      } else {
        const std::vector<uint16_t> h = to_half16(x, half_of(t));
        keep.push_back(upload(h));
        ref += sum_squares_reference(h.data(), half_of(t), lengths[i]);
      }
      buffers.push_back({keep.back()->raw(), lengths[i]});
    }
    cuda::launch_multi_tensor_sum_squares(buffers.data(), buffers.size(), t, out.as<double>(),
                                          workspace.as<double>(), nullptr);
    const double got = download(out.as<double>(), 1)[0];
    CHECK(std::fabs(got - ref) <= 1e-12 * ref);
    // Deterministic: the same list gives the same bits again.
    cuda::launch_multi_tensor_sum_squares(buffers.data(), buffers.size(), t, out.as<double>(),
                                          workspace.as<double>(), nullptr);
    CHECK(download(out.as<double>(), 1)[0] == got);
  }
}

TEST_CASE("CUDA qwZ quantize and dequantize give the references' bits", "[kernels][cuda][qwz]") {
  for (const int64_t numel : {int64_t{8}, int64_t{1024}, int64_t{16488}, int64_t{589824}}) {
    const int64_t groups = qwz_group_count(numel);
    INFO(numel << " elements in " << groups << " groups");
    std::vector<uint16_t> x(static_cast<size_t>(numel));
    const std::vector<float>& f = cached_floats(numel, 31);
    for (size_t i = 0; i < x.size(); ++i) x[i] = float_to_half16(f[i], Half16::kFp16);
    std::vector<int8_t> q_ref(x.size());
    std::vector<float> inv_ref(static_cast<size_t>(groups));
    std::vector<uint16_t> out_ref(x.size());
    quantize_int8_symmetric_reference(x.data(), numel, groups, q_ref.data(), inv_ref.data());
    dequantize_int8_symmetric_reference(q_ref.data(), inv_ref.data(), numel, groups,
                                        out_ref.data());
    std::unique_ptr<DeviceBuffer> in = upload(x);
    DeviceBuffer q(static_cast<size_t>(numel)), inv(static_cast<size_t>(groups) * sizeof(float));
    DeviceBuffer out(static_cast<size_t>(numel) * 2);
    cuda::launch_qwz_quantize(in->as<uint16_t>(), numel, groups, q.as<int8_t>(), inv.as<float>(),
                              nullptr);
    cuda::launch_qwz_dequantize(q.as<int8_t>(), inv.as<float>(), numel, groups, out.as<uint16_t>(),
                                nullptr);
    CHECK(download(q.as<int8_t>(), static_cast<size_t>(numel)) == q_ref);
    CHECK(download(inv.as<float>(), static_cast<size_t>(groups)) == inv_ref);
    CHECK(compare_bits(download(out.as<uint16_t>(), static_cast<size_t>(numel)), out_ref) == "");
  }
  check_cuda(cudaDeviceSynchronize(), "qwZ kernels");
}
