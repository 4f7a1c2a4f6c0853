// qwZ's quantized all-gather (quantized_gather.h) on the kernels of kernels/quantize.h: the
// vectorized CPU ones, or their CUDA twins on LibTorch's current stream (which the NCCL
// communicator orders its collectives after).
#include "quantized_gather.h"

#include <zero/error.h>
#include <zero/kernels/quantize.h>

#include <ATen/ATen.h>

#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
#include <zero/kernels/cuda.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <cmath>

namespace zero::detail {
namespace {

// values (int8) and scales (fp32 inverse scales) of `fp16` in `blocks` blocks. True when the
// scales can be read on the host now (the CPU); a device check would stall every gather.
bool quantize_shard(const at::Tensor& fp16, int64_t blocks, at::Tensor& values,
                    at::Tensor& scales) {
  const auto* in = static_cast<const uint16_t*>(fp16.data_ptr());
#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
  if (fp16.is_cuda()) {
    c10::cuda::CUDAGuard guard(fp16.device());
    kernels::cuda::launch_qwz_quantize(
        in, fp16.numel(), blocks, values.data_ptr<int8_t>(), scales.data_ptr<float>(),
        c10::cuda::getCurrentCUDAStream(fp16.device().index()).stream());
    return false;
  }
#endif
  ZERO_CHECK(fp16.device().is_cpu(), UsageError,
             "zero_quantized_weights: no quantization kernels for a shard on ",
             fp16.device().str());
  kernels::quantize_int8_symmetric_cpu(in, fp16.numel(), blocks, values.data_ptr<int8_t>(),
                                       scales.data_ptr<float>());
  return true;
}

void dequantize_gathered(const at::Tensor& values, const at::Tensor& scales, at::Tensor& fp16) {
  auto* out = static_cast<uint16_t*>(fp16.data_ptr());
#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
  if (fp16.is_cuda()) {
    c10::cuda::CUDAGuard guard(fp16.device());
    kernels::cuda::launch_qwz_dequantize(
        values.data_ptr<int8_t>(), scales.data_ptr<float>(), values.numel(), scales.numel(), out,
        c10::cuda::getCurrentCUDAStream(fp16.device().index()).stream());
    return;
  }
#endif
  kernels::dequantize_int8_symmetric_cpu(values.data_ptr<int8_t>(), scales.data_ptr<float>(),
                                         values.numel(), scales.numel(), out);
}

}  // namespace

QuantizedGather start_quantized_gather(Communicator& comm, const at::Tensor& shard,
                                       const at::Tensor& out) {
  const int world = comm.world_size();
  const int64_t numel = shard.numel();
  ZERO_ASSERT(out.numel() == numel * world, "qwZ gather of ", numel, " into ", out.numel());
  QuantizedGather g;
  g.out = out;
  g.blocks = kernels::qwz_group_count(numel);
  // DeepSpeed's kernel reads fp16; its quantize() converts fp32 and bf16 first.
  const at::Tensor fp16 =
      shard.scalar_type() == at::kHalf ? shard.contiguous() : shard.to(at::kHalf);
  at::Tensor values = at::empty({numel}, shard.options().dtype(at::kChar));
  at::Tensor scales = at::empty({g.blocks}, shard.options().dtype(at::kFloat));
  if (quantize_shard(fp16, g.blocks, values, scales)) {
    const float* inv = scales.data_ptr<float>();
    for (int64_t b = 0; b < g.blocks; ++b)
      ZERO_CHECK(std::isfinite(inv[b]), UsageError, "zero_quantized_weights: rank ", comm.rank(),
                 "'s parameter shard holds values beyond fp16's range (|x| > 65504) or not "
                 "finite in block ",
                 b, " of ", g.blocks, "; the quantizer reads fp16, as DeepSpeed's does");
  }
  g.values_all = at::empty({numel * world}, values.options());
  g.scales_all = at::empty({g.blocks * world}, scales.options());
  g.values = comm.all_gather(values, g.values_all);
  g.scales = comm.all_gather(scales, g.scales_all);
  return g;
}

void finish_quantized_gather(QuantizedGather& g) {
  g.values->wait();
  g.scales->wait();
  const bool direct = g.out.scalar_type() == at::kHalf && g.out.is_contiguous();
  at::Tensor fp16 = direct ? g.out : at::empty({g.out.numel()}, g.out.options().dtype(at::kHalf));
  dequantize_gathered(g.values_all, g.scales_all, fp16);
  if (!direct) g.out.copy_(fp16.view(g.out.sizes()));
  g = QuantizedGather{};
}

}  // namespace zero::detail
