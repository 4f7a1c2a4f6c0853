// The fused CUDA Adam step for shards on a GPU: one multi-tensor launch sequence on the
// current stream. Available when this build has CUDA kernels and LibTorch has CUDA.
#pragma once

#include <zero/core/stage.h>
#include <zero/kernels/adam.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace zero::detail {

// Runs Adam/AdamW (p) on shards[i] for every i in `which` (fp32 masters and moments, fp32 or
// 16-bit gradients, all contiguous on one CUDA device). Returns false, having done nothing,
// when the fused kernel is not available in this build or the tensors do not fit it.
bool cuda_adam_step(const kernels::AdamParams& p, const std::vector<OptimizerShard>& shards,
                    const std::vector<size_t>& which, std::vector<at::Tensor>& exp_avg,
                    std::vector<at::Tensor>& exp_avg_sq);

}  // namespace zero::detail
