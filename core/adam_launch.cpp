// for_each_adam_launch: the host side of the fused Adam step, shared by the CUDA launcher
// (cuda_optimizer.cpp) and the CPU Adam (optimizer.cpp, through kernels::multi_tensor_adam_cpu).
#include "adam_launch.h"

#include <zero/error.h>

namespace zero::detail {
namespace {

bool on(const at::Tensor& t, const at::Device& device) {
  return t.device() == device && t.is_contiguous();
}

// The shard's entry of a launch list, or none when the kernels cannot take it.
std::optional<kernels::AdamShard> entry(const OptimizerShard& s, const at::Tensor& m,
                                        const at::Tensor& v, const at::Device& device) {
  const int64_t n = s.master.numel();
  ZERO_ASSERT(m.numel() == n && v.numel() == n && s.grad.numel() == n, "group ", s.group,
              ": optimizer state and gradient sizes differ from the master's");
  const bool fp32 = s.master.scalar_type() == at::kFloat && m.scalar_type() == at::kFloat &&
                    v.scalar_type() == at::kFloat;
  if (!fp32 || !on(s.master, device) || !on(m, device) || !on(v, device) || !on(s.grad, device) ||
      !kernel_dtype(s.grad.scalar_type()))
    return std::nullopt;
  if (s.param16.defined()) {
    const auto t16 = kernel_dtype(s.param16.scalar_type());
    if (!t16 || *t16 == kernels::DType::kFp32 || !on(s.param16, device) || s.param16.numel() != n)
      return std::nullopt;
  }
  return kernels::AdamShard{s.master.data_ptr<float>(),
                            s.grad.data_ptr(),
                            m.data_ptr<float>(),
                            v.data_ptr<float>(),
                            s.param16.defined() ? s.param16.data_ptr() : nullptr,
                            n};
}

}  // namespace

std::optional<kernels::DType> kernel_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return kernels::DType::kFp32;
    case at::kHalf:
      return kernels::DType::kFp16;
    case at::kBFloat16:
      return kernels::DType::kBf16;
    default:
      return std::nullopt;
  }
}

std::vector<size_t> for_each_adam_launch(const std::vector<OptimizerShard>& shards,
                                         const std::vector<size_t>& which,
                                         const std::vector<at::Tensor>& exp_avg,
                                         const std::vector<at::Tensor>& exp_avg_sq,
                                         const at::Device& device,
                                         const std::function<void(const AdamLaunch&)>& launch) {
  std::vector<size_t> rest;
  std::vector<std::pair<size_t, kernels::AdamShard>> fit;
  for (size_t i : which) {
    const auto e = entry(shards[i], exp_avg[i], exp_avg_sq[i], device);
    if (e)
      fit.emplace_back(i, *e);
    else
      rest.push_back(i);
  }
  // One launch per (gradient dtype, param16 dtype); shards without param16 join any of them.
  while (!fit.empty()) {
    AdamLaunch l;
    l.grad_type = *kernel_dtype(shards[fit[0].first].grad.scalar_type());
    std::optional<kernels::DType> t16;
    std::vector<std::pair<size_t, kernels::AdamShard>> later;
    for (const auto& [i, e] : fit) {
      const OptimizerShard& s = shards[i];
      const std::optional<kernels::DType> own16 =
          s.param16.defined() ? kernel_dtype(s.param16.scalar_type()) : std::nullopt;
      const bool same =
          *kernel_dtype(s.grad.scalar_type()) == l.grad_type && (!own16 || !t16 || *own16 == *t16);
      if (!same) {
        later.emplace_back(i, e);
        continue;
      }
      if (own16) t16 = own16;
      l.list.push_back(e);
      l.taken.push_back(i);
    }
    if (t16) l.param16_type = *t16;
    launch(l);
    fit = std::move(later);
  }
  return rest;
}

}  // namespace zero::detail
