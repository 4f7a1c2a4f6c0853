// qwZ's quantized all-gather (quantized_gather.h) on the CPU kernels of kernels/quantize.h.
#include "quantized_gather.h"

#include <zero/error.h>
#include <zero/kernels/quantize.h>

#include <ATen/ATen.h>

#include <cmath>

namespace zero::detail {

QuantizedGather start_quantized_gather(Communicator& comm, const at::Tensor& shard,
                                       const at::Tensor& out) {
  ZERO_CHECK(shard.device().is_cpu(), UsageError,
             "zero_quantized_weights: the quantization kernels run on the CPU only; a shard on ",
             shard.device().str());
  const int world = comm.world_size();
  const int64_t numel = shard.numel();
  ZERO_ASSERT(out.numel() == numel * world, "qwZ gather of ", numel, " into ", out.numel());
  QuantizedGather g;
  g.out = out;
  g.blocks = kernels::qwz_group_count(numel);
  // DeepSpeed's kernel reads fp16; its quantize() converts fp32 and bf16 first.
  const at::Tensor fp16 =
      shard.scalar_type() == at::kHalf ? shard.contiguous() : shard.to(at::kHalf);
  at::Tensor values = at::empty({numel}, at::TensorOptions().dtype(at::kChar));
  at::Tensor scales = at::empty({g.blocks}, at::TensorOptions().dtype(at::kFloat));
  kernels::quantize_int8_symmetric_cpu(static_cast<const uint16_t*>(fp16.data_ptr()), numel,
                                       g.blocks, values.data_ptr<int8_t>(),
                                       scales.data_ptr<float>());
  const float* inv = scales.data_ptr<float>();
  for (int64_t b = 0; b < g.blocks; ++b)
    ZERO_CHECK(std::isfinite(inv[b]), UsageError, "zero_quantized_weights: rank ", comm.rank(),
               "'s parameter shard holds values beyond fp16's range (|x| > 65504) or not finite "
               "in block ",
               b, " of ", g.blocks, "; the quantizer reads fp16, as DeepSpeed's does");
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
  kernels::dequantize_int8_symmetric_cpu(
      g.values_all.data_ptr<int8_t>(), g.scales_all.data_ptr<float>(), g.values_all.numel(),
      g.scales_all.numel(), static_cast<uint16_t*>(fp16.data_ptr()));
  if (!direct) g.out.copy_(fp16.view(g.out.sizes()));
  g = QuantizedGather{};
}

}  // namespace zero::detail
