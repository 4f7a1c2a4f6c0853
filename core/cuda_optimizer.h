// The fused CUDA Adam step for shards on a GPU: one multi-tensor launch sequence on the
// current stream. Available when this build has CUDA kernels and LibTorch has CUDA.
#pragma once

#include <zero/core/stage.h>
#include <zero/kernels/adam.h>

#include <ATen/core/Tensor.h>

#include <vector>

namespace zero::detail {

// Runs Adam/AdamW (p) on the shards of `which` that the fused kernel takes (on the CUDA device
// of the first one's master; see for_each_adam_launch), writing param16 where defined. Returns
// the indices it did not update: all of `which` when this build has no fused kernel.
std::vector<size_t> cuda_adam_step(const kernels::AdamParams& p,
                                   const std::vector<OptimizerShard>& shards,
                                   const std::vector<size_t>& which,
                                   std::vector<at::Tensor>& exp_avg,
                                   std::vector<at::Tensor>& exp_avg_sq);

}  // namespace zero::detail
