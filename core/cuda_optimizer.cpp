// cuda_adam_step: the shards' launch lists (adam_launch.h, the host code the CPU Adam shares)
// handed to the fused multi-tensor Adam launcher of kernels/cuda on LibTorch's current stream.
#include "cuda_optimizer.h"

#include "adam_launch.h"

#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
#include <zero/kernels/cuda.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace zero::detail {

#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)

std::vector<size_t> cuda_adam_step(const kernels::AdamParams& p,
                                   const std::vector<OptimizerShard>& shards,
                                   const std::vector<size_t>& which,
                                   std::vector<at::Tensor>& exp_avg,
                                   std::vector<at::Tensor>& exp_avg_sq) {
  if (which.empty()) return {};
  const at::Device device = shards[which[0]].master.device();
  if (!device.is_cuda()) return which;
  c10::cuda::CUDAGuard guard(device);
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device.index()).stream();
  return for_each_adam_launch(shards, which, exp_avg, exp_avg_sq, device, [&](const AdamLaunch& l) {
    kernels::cuda::launch_multi_tensor_adam(p, l.list.data(), l.list.size(), l.grad_type,
                                            l.param16_type, stream);
  });
}

#else

std::vector<size_t> cuda_adam_step(const kernels::AdamParams&, const std::vector<OptimizerShard>&,
                                   const std::vector<size_t>& which, std::vector<at::Tensor>&,
                                   std::vector<at::Tensor>&) {
  return which;
}

#endif

}  // namespace zero::detail
