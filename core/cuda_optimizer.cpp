// cuda_adam_step: collects the shards' device pointers and calls the fused multi-tensor Adam
// launcher of kernels/cuda on LibTorch's current CUDA stream.
#include "cuda_optimizer.h"

#include <optional>

#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
#include <zero/kernels/cuda.h>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace zero::detail {

#if defined(ZERO_HAS_CUDA) && defined(ZERO_TORCH_HAS_CUDA)
namespace {

std::optional<kernels::cuda::DType> cuda_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return kernels::cuda::DType::kFp32;
    case at::kHalf:
      return kernels::cuda::DType::kFp16;
    case at::kBFloat16:
      return kernels::cuda::DType::kBf16;
    default:
      return std::nullopt;
  }
}

}  // namespace

bool cuda_adam_step(const kernels::AdamParams& p, const std::vector<OptimizerShard>& shards,
                    const std::vector<size_t>& which, std::vector<at::Tensor>& exp_avg,
                    std::vector<at::Tensor>& exp_avg_sq) {
  if (which.empty()) return true;
  const at::Tensor& first = shards[which[0]].grad;
  const auto grad_type = cuda_dtype(first.scalar_type());
  if (!grad_type || !first.is_cuda()) return false;
  const at::Tensor& first16 = shards[which[0]].param16;
  const auto param16_type = first16.defined() ? cuda_dtype(first16.scalar_type())
                                              : std::optional(kernels::cuda::DType::kBf16);
  if (!param16_type || *param16_type == kernels::cuda::DType::kFp32) return false;
  std::vector<kernels::cuda::AdamShard> list;
  for (size_t i : which) {
    const OptimizerShard& s = shards[i];
    const bool fits =
        s.grad.is_cuda() && s.master.is_cuda() && s.grad.scalar_type() == first.scalar_type() &&
        s.grad.device() == first.device() && s.grad.is_contiguous() && s.master.is_contiguous() &&
        exp_avg[i].is_contiguous() && exp_avg_sq[i].is_contiguous();
    if (!fits) return false;
    list.push_back({s.master.data_ptr<float>(), s.grad.data_ptr(), exp_avg[i].data_ptr<float>(),
                    exp_avg_sq[i].data_ptr<float>(), nullptr, s.master.numel()});
  }
  c10::cuda::CUDAGuard guard(first.device());
  kernels::cuda::launch_multi_tensor_adam(p, list.data(), list.size(), *grad_type, *param16_type,
                                          c10::cuda::getCurrentCUDAStream().stream());
  return true;
}

#else

bool cuda_adam_step(const kernels::AdamParams&, const std::vector<OptimizerShard>&,
                    const std::vector<size_t>&, std::vector<at::Tensor>&,
                    std::vector<at::Tensor>&) {
  return false;
}

#endif

}  // namespace zero::detail
