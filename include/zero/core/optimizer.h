// Optimizers that update this rank's fp32 master shards in place: Adam/AdamW (CPU: the
// vectorized kernel; other devices: ATen ops) and SGD with momentum, with their state.
#pragma once

#include <zero/core/stage.h>
#include <zero/kernels/adam.h>

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

// The CPU kernels' hyper-parameters of one Adam/AdamW step.
kernels::AdamParams adam_params(const OptimizerOptions& o, double lr, int64_t step,
                                double grad_scale);
// One Adam step on host memory with the vectorized kernels. master, exp_avg, exp_avg_sq: fp32,
// contiguous, on the CPU; grad: fp32, fp16 or bf16, contiguous, on the CPU; out: undefined, or
// a contiguous CPU tensor of fp16/bf16 that receives the updated master in the same pass. All
// the same numel. False (and nothing done) when the tensors are not of these kinds.
bool adam_step_host(const kernels::AdamParams& p, const at::Tensor& master, const at::Tensor& grad,
                    const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq, const at::Tensor& out);

// Where an optimizer's own memory is (offload); all zero for one that lives on the device.
struct OffloadMemory {
  int64_t host_master_bytes = 0;   // fp32 master copies in host memory
  int64_t host_states_bytes = 0;   // moments in host memory
  int64_t host_grads_bytes = 0;    // gradient copies in host memory
  int64_t host_buffers_bytes = 0;  // staging and swap pipeline buffers
  int64_t nvme_bytes = 0;          // swap files (master and moments)
};

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
  // An optimizer that keeps the fp32 masters itself (offload): shard `shard`'s master (writable;
  // a checkpoint load fills it, then calls masters_changed()). Undefined otherwise: the stage's
  // OptimizerShard::master is it.
  virtual at::Tensor master(size_t shard) const { return {}; }
  // After master(i) or state(i) were written from outside: NVMe offload writes them back.
  virtual void masters_changed() {}
  // Offload: the stage reports each part of a gradient shard that is final (GradReadyFn), so
  // the optimizer copies it to the host while backward goes on. The step was skipped: copies
  // made ahead of it are stale.
  virtual bool wants_grad_copies() const { return false; }
  virtual void grad_ready(int group, int64_t begin, int64_t numel) {}
  virtual void drop_gradients() {}
  virtual OffloadMemory offload_memory() const { return {}; }
  // Where the master and states live, for the start-up line ("device", "cpu", "nvme").
  virtual std::string location() const { return "device"; }
};

}  // namespace zero
