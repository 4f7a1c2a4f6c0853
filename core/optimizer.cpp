// ShardOptimizer implementations: Adam/AdamW (torch.optim math; CPU shards through the launch
// lists of the fused kernel and its CPU twin, CUDA shards through the fused kernel, the rest
// through ATen ops) and SGD with momentum (ATen ops).
#include <zero/core/optimizer.h>
#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/multi_tensor.h>

#include "adam_launch.h"
#include "cuda_optimizer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>

namespace zero {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

std::optional<kernels::Half16> half16_of(at::ScalarType t) {
  if (t == at::kHalf) return kernels::Half16::kFp16;
  if (t == at::kBFloat16) return kernels::Half16::kBf16;
  return std::nullopt;
}

void check_shard(const OptimizerShard& s) {
  ZERO_ASSERT(s.master.defined() && s.grad.defined(), "group ", s.group);
  ZERO_ASSERT(s.master.numel() == s.grad.numel(), "group ", s.group);
  ZERO_ASSERT(s.master.scalar_type() == at::kFloat && s.master.is_contiguous(), "group ", s.group);
}

class AdamOptimizer : public ShardOptimizer {
 public:
  explicit AdamOptimizer(const OptimizerOptions& o) : options_(o) {}

  void init_state(const std::vector<OptimizerShard>& shards) override {
    exp_avg_.clear();
    exp_avg_sq_.clear();
    for (const auto& s : shards) {
      check_shard(s);
      exp_avg_.push_back(at::zeros_like(s.master));
      exp_avg_sq_.push_back(at::zeros_like(s.master));
    }
  }

  void step(const std::vector<OptimizerShard>& shards, double lr, int64_t step,
            double grad_scale) override {
    ZERO_ASSERT(shards.size() == exp_avg_.size(), "optimizer state not initialised");
    const kernels::AdamParams p = adam_params(options_, lr, step, grad_scale);
    // CPU shards go through the very launch lists the fused CUDA kernel gets (adam_launch.h),
    // run by its CPU twin: a pointer the list drops fails the CPU tests too.
    std::vector<size_t> cpu, others;
    for (size_t i = 0; i < shards.size(); ++i) {
      const OptimizerShard& s = shards[i];
      check_shard(s);
      if (s.master.numel() == 0) continue;
      (s.master.is_cpu() ? cpu : others).push_back(i);
    }
    const std::vector<size_t> rest = detail::for_each_adam_launch(
        shards, cpu, exp_avg_, exp_avg_sq_, at::Device(at::kCPU), [&](const detail::AdamLaunch& l) {
          kernels::multi_tensor_adam_cpu(p, l.list.data(), l.list.size(), l.grad_type,
                                         l.param16_type);
        });
    others.insert(others.end(), rest.begin(), rest.end());
    if (!others.empty()) step_others(shards, others, p, lr, step, grad_scale);
  }

  std::vector<std::string> state_kinds() const override { return {"exp_avg", "exp_avg_sq"}; }
  std::vector<at::Tensor> state(size_t shard) const override {
    return {exp_avg_.at(shard), exp_avg_sq_.at(shard)};
  }
  int64_t state_bytes() const override {
    int64_t n = 0;
    for (size_t i = 0; i < exp_avg_.size(); ++i)
      n += exp_avg_[i].nbytes() + exp_avg_sq_[i].nbytes();
    return n;
  }

  bool set_betas(double beta1, double beta2) override {
    options_.beta1 = beta1;
    options_.beta2 = beta2;
    return true;
  }

 private:
  // Shards on a GPU: the fused multi-tensor CUDA kernel when this build has it and LibTorch
  // can name the current stream; ATen ops otherwise (and for anything the kernels do not take).
  void step_others(const std::vector<OptimizerShard>& shards, const std::vector<size_t>& which,
                   const kernels::AdamParams& p, double lr, int64_t step, double grad_scale) {
    const std::vector<size_t> rest =
        detail::cuda_adam_step(p, shards, which, exp_avg_, exp_avg_sq_);
    const bool adamw = options_.kind == OptimizerKind::kAdamW;
    for (size_t i : rest) {
      at::Tensor g = shards[i].grad.to(at::kFloat);
      if (grad_scale != 1.0) g = g.div(grad_scale);
      step_aten(shards[i], g, exp_avg_[i], exp_avg_sq_[i], lr, step, adamw);
    }
  }

  // torch.optim.Adam / AdamW with ATen ops: the device-independent path.
  void step_aten(const OptimizerShard& s, at::Tensor g, at::Tensor& m, at::Tensor& v, double lr,
                 int64_t step, bool adamw) const {
    at::Tensor p = s.master;
    const double wd = options_.weight_decay;
    if (wd != 0) {
      if (adamw)
        p.mul_(1 - lr * wd);
      else
        g = g.add(p, wd);
    }
    m.mul_(options_.beta1).add_(g, 1 - options_.beta1);
    v.mul_(options_.beta2).addcmul_(g, g, 1 - options_.beta2);
    double bc1 = 1, bc2 = 1;
    if (options_.bias_correction) {
      bc1 = 1 - std::pow(options_.beta1, step);
      bc2 = 1 - std::pow(options_.beta2, step);
    }
    at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(options_.eps);
    p.addcdiv_(m, denom, -lr / bc1);
    if (s.param16.defined()) s.param16.copy_(p);
  }

  OptimizerOptions options_;
  std::vector<at::Tensor> exp_avg_, exp_avg_sq_;
};

// torch.optim.SGD: d = g + wd * p; buf = momentum * buf + (1 - dampening) * d (buf = d at the
// first step); d = nesterov ? d + momentum * buf : buf; p -= lr * d.
class SgdOptimizer : public ShardOptimizer {
 public:
  explicit SgdOptimizer(const OptimizerOptions& o) : options_(o) {}

  void init_state(const std::vector<OptimizerShard>& shards) override {
    buf_.clear();
    for (const auto& s : shards) {
      check_shard(s);
      buf_.push_back(options_.momentum != 0 ? at::zeros_like(s.master) : at::Tensor());
    }
  }

  void step(const std::vector<OptimizerShard>& shards, double lr, int64_t step,
            double grad_scale) override {
    ZERO_ASSERT(shards.size() == buf_.size(), "optimizer state not initialised");
    for (size_t i = 0; i < shards.size(); ++i) {
      const OptimizerShard& s = shards[i];
      if (s.master.numel() == 0) continue;
      at::Tensor d = s.grad.to(at::kFloat);
      if (grad_scale != 1.0) d = d.div(grad_scale);
      if (options_.weight_decay != 0) d = d.add(s.master, options_.weight_decay);
      if (options_.momentum != 0) {
        if (step == 1)
          buf_[i].copy_(d);
        else
          buf_[i].mul_(options_.momentum).add_(d, 1 - options_.dampening);
        d = options_.nesterov ? d.add(buf_[i], options_.momentum) : buf_[i];
      }
      s.master.add_(d, -lr);
      if (s.param16.defined()) s.param16.copy_(s.master);
    }
  }

  std::vector<std::string> state_kinds() const override {
    if (options_.momentum == 0) return {};
    return {"momentum_buffer"};
  }
  std::vector<at::Tensor> state(size_t shard) const override {
    if (options_.momentum == 0) return {};
    return {buf_.at(shard)};
  }
  int64_t state_bytes() const override {
    int64_t n = 0;
    for (const auto& b : buf_)
      if (b.defined()) n += b.nbytes();
    return n;
  }

 private:
  OptimizerOptions options_;
  std::vector<at::Tensor> buf_;
};

}  // namespace

kernels::AdamParams adam_params(const OptimizerOptions& o, double lr, int64_t step,
                                double grad_scale) {
  kernels::AdamParams p{};
  p.lr = static_cast<float>(lr);
  p.beta1 = static_cast<float>(o.beta1);
  p.beta2 = static_cast<float>(o.beta2);
  p.eps = static_cast<float>(o.eps);
  p.weight_decay = static_cast<float>(o.weight_decay);
  p.adamw_mode = o.kind == OptimizerKind::kAdamW;
  p.bias_correction = o.bias_correction;
  p.step = step;
  p.grad_scale = static_cast<float>(grad_scale);
  return p;
}

bool adam_step_host(const kernels::AdamParams& p, const at::Tensor& master, const at::Tensor& grad,
                    const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                    const at::Tensor& out) {
  const auto g16 = half16_of(grad.scalar_type());
  const auto out16_type = out.defined() ? half16_of(out.scalar_type()) : std::nullopt;
  const bool out_ok = !out.defined() || (out.is_cpu() && out.is_contiguous() && out16_type);
  if (!master.is_cpu() || !grad.is_cpu() || !grad.is_contiguous() || !out_ok ||
      (grad.scalar_type() != at::kFloat && !g16))
    return false;
  const int64_t n = master.numel();
  ZERO_ASSERT(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n &&
                  (!out.defined() || out.numel() == n),
              "adam_step_host: sizes differ");
  float* m = exp_avg.data_ptr<float>();
  float* v = exp_avg_sq.data_ptr<float>();
  float* w = master.data_ptr<float>();
  uint16_t* out16 = nullptr;
  // A plain value, not the optional: g++ cannot see that out16 set implies a type, and warns.
  kernels::Half16 out_kind = g16 ? *g16 : kernels::Half16::kBf16;  // ignored without out16
  if (out16_type) {
    out16 = static_cast<uint16_t*>(out.data_ptr());
    out_kind = *out16_type;
  }
  if (grad.scalar_type() == at::kFloat && !out16)
    kernels::adam_step_cpu(p, w, grad.data_ptr<float>(), m, v, n);
  else if (grad.scalar_type() == at::kFloat)
    kernels::adam_step_cpu_fp32_grad(p, w, grad.data_ptr<float>(), m, v, out16, out_kind, n);
  else
    kernels::adam_step_cpu_mixed(p, w, static_cast<const uint16_t*>(grad.data_ptr()), *g16, m, v,
                                 out16, out_kind, n);
  return true;
}

OptimizerKind parse_optimizer_kind(const std::string& type) {
  const std::string t = lower(type);
  if (t == "adam") return OptimizerKind::kAdam;
  if (t == "adamw") return OptimizerKind::kAdamW;
  if (t == "sgd") return OptimizerKind::kSgd;
  throw ConfigError(detail::str("optimizer.type: '", type,
                                "' is not supported; supported types: Adam, AdamW, SGD"));
}

std::unique_ptr<ShardOptimizer> ShardOptimizer::create(const OptimizerOptions& options) {
  if (options.kind == OptimizerKind::kSgd) return std::make_unique<SgdOptimizer>(options);
  return std::make_unique<AdamOptimizer>(options);
}

}  // namespace zero
