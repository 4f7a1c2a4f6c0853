// Optimizers that update this rank's fp32 master shards in place: Adam/AdamW (CPU: the
// vectorized kernel; other devices: ATen ops) and SGD with momentum, with their state.
#pragma once

#include <zero/core/stage.h>

#include <memory>
#include <string>
#include <vector>

namespace zero {

enum class OptimizerKind { kAdam, kAdamW, kSgd };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  bool bias_correction = true;
  double momentum = 0.0, dampening = 0.0;
  bool nesterov = false;
};

// Parses "Adam" / "AdamW" / "SGD" (case-insensitive); throws ConfigError naming
// optimizer.type and the supported types otherwise.
OptimizerKind parse_optimizer_kind(const std::string& type);

class ShardOptimizer {
 public:
  static std::unique_ptr<ShardOptimizer> create(const OptimizerOptions& options);
  virtual ~ShardOptimizer() = default;
  // Allocates the state for these shards (same order and sizes at every step).
  virtual void init_state(const std::vector<OptimizerShard>& shards) = 0;
  // One step at learning rate lr; `step` is 1-based (the count after this update). The
  // gradients are divided by grad_scale first (the loss scale times the clipping factor),
  // fused into the update where the kernel allows; they are not modified. Every shard's
  // param16, when defined, receives the updated master in its dtype (in the same pass on the
  // vectorized CPU and CUDA kernels).
  virtual void step(const std::vector<OptimizerShard>& shards, double lr, int64_t step,
                    double grad_scale = 1.0) = 0;
  virtual int64_t state_bytes() const = 0;
  // The state tensors of shard `shard` (fp32, the master's numel), one per name of
  // state_kinds() in that order ("exp_avg", "exp_avg_sq" for Adam; "momentum_buffer" for SGD
  // with momentum; none otherwise). Writable: a checkpoint load fills them in place.
  virtual std::vector<std::string> state_kinds() const = 0;
  virtual std::vector<at::Tensor> state(size_t shard) const = 0;
  // Adam/AdamW: the betas of the following steps (a schedule's momentum cycling). False, and
  // nothing changes, for an optimizer without betas (SGD).
  virtual bool set_betas(double beta1, double beta2) { return false; }
};

}  // namespace zero
