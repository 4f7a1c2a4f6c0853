// The fused multi-tensor Adam's launch lists: which optimizer shards one launch takes and the
// pointers it gets. One function builds them for the CUDA launcher and for its CPU twin (which
// the CPU Adam runs), so a field the CUDA path would drop fails the CPU tests.
#pragma once

#include <zero/core/stage.h>
#include <zero/kernels/multi_tensor.h>

#include <ATen/core/Tensor.h>

#include <functional>
#include <optional>
#include <vector>

namespace zero::detail {

std::optional<kernels::DType> kernel_dtype(at::ScalarType t);  // fp32, fp16, bf16; else none

// One launch: list[k] is shards[taken[k]]; every gradient is `grad_type`, every defined param16
// `param16_type` (kBf16 when none is defined: the kernels then ignore it).
struct AdamLaunch {
  std::vector<kernels::AdamShard> list;
  std::vector<size_t> taken;
  kernels::DType grad_type = kernels::DType::kFp32;
  kernels::DType param16_type = kernels::DType::kBf16;
};

// The shards of `which` that fit the kernels, grouped into launches by dtype: master, moments
// and gradient contiguous on `device` (master and moments fp32, gradient fp32/fp16/bf16 of the
// master's numel), and param16 undefined or contiguous 16-bit on `device` of the master's numel.
// Calls `launch` once per launch list; returns the indices of `which` no list took, in order.
std::vector<size_t> for_each_adam_launch(const std::vector<OptimizerShard>& shards,
                                         const std::vector<size_t>& which,
                                         const std::vector<at::Tensor>& exp_avg,
                                         const std::vector<at::Tensor>& exp_avg_sq,
                                         const at::Device& device,
                                         const std::function<void(const AdamLaunch&)>& launch);

}  // namespace zero::detail
