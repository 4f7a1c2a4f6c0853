// Optimizer construction from the ds_config, offload included. The offload checks follow
// DeepSpeed's rules (offload needs a ZeRO stage; offload_param only at stage 3) with our
// wording, and refuse what would change the math that we have not built (ratio, super_offload).
#include "optimizer_setup.h"

#include "checkpoint_io.h"

#include <zero/checkpoint/atomic_files.h>
#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>

#include <cstdio>
#include <cstdlib>
#include <random>

namespace zero::detail {

OptimizerOptions optimizer_options(const OptimizerConfig& o) {
  OptimizerOptions out;
  out.kind = parse_optimizer_kind(o.type);
  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (the config resolves it).
  if (out.kind == OptimizerKind::kAdam && o.adam_w_mode) out.kind = OptimizerKind::kAdamW;
  out.beta1 = o.betas[0];
  out.beta2 = o.betas[1];
  out.eps = o.eps;
  out.weight_decay = o.weight_decay;
  out.bias_correction = o.bias_correction;
  out.momentum = o.momentum;
  out.dampening = o.dampening;
  out.nesterov = o.nesterov;
  return out;
}

void check_offload_config(const Config& c) {
  const ZeroOptimizationConfig& z = c.zero_optimization;
  const OffloadOptimizerConfig& oo = z.offload_optimizer;
  const OffloadParamConfig& op = z.offload_param;
  // At stage 0 the parser warned that offload has no effect (DeepSpeed ignores it there).
  if (oo.device != "none" && z.stage >= 1) {
    ZERO_CHECK(oo.ratio == 1.0, ConfigError, "zero_optimization.offload_optimizer.ratio ", oo.ratio,
               ": partial offload is not supported (only 1.0, the whole optimizer state)");
    ZERO_CHECK(!oo.super_offload, ConfigError,
               "zero_optimization.offload_optimizer.super_offload: not supported");
    ZERO_CHECK(oo.device != "nvme" || !oo.nvme_path.empty(), ConfigError,
               "zero_optimization.offload_optimizer.device is \"nvme\" but nvme_path is not set; "
               "give a directory on a local disk");
    ZERO_CHECK(oo.device != "nvme" || oo.buffer_count >= 1, ConfigError,
               "zero_optimization.offload_optimizer.buffer_count must be >= 1 for nvme, got ",
               oo.buffer_count);
  }
  // Below stage 3 the parser warned that offload_param has no effect (as DeepSpeed ignores it).
  if (op.device != "none" && z.stage == 3) {
    ZERO_CHECK(false, ConfigError,
               "zero_optimization.offload_param: parameter offload is not supported by this "
               "build yet; set offload_param.device to \"none\" (offload_optimizer works)");
  }
}

namespace {

// The same on every rank: ZERO_JOB_ID or SLURM_JOB_ID when set, else rank 0's nonce.
std::string swap_job_id(Communicator& comm, at::Device device) {
  for (const char* name : {"ZERO_JOB_ID", "SLURM_JOB_ID"})
    if (const char* v = std::getenv(name); v && *v && ckpt::is_safe_component(v))
      return std::string("job-") + v;
  int64_t nonce = 0;
  if (comm.rank() == 0) {
    std::random_device random;
    nonce = (static_cast<int64_t>(random() & 0x7fffffff) << 32) | random();
  }
  nonce = broadcast_value(comm, nonce, device);
  char text[32];
  std::snprintf(text, sizeof text, "job-%llx", static_cast<unsigned long long>(nonce));
  return text;
}

}  // namespace

std::unique_ptr<ShardOptimizer> make_optimizer(const Config& c, Communicator& comm,
                                               at::Device device) {
  const OffloadOptimizerConfig& oo = c.zero_optimization.offload_optimizer;
  if (oo.device == "none" || c.zero_optimization.stage == 0)
    return ShardOptimizer::create(optimizer_options(c.optimizer));
  offload::OffloadOptimizerOptions o;
  o.optimizer = optimizer_options(c.optimizer);
  o.nvme = oo.device == "nvme";
  o.sub_group_numel = c.zero_optimization.sub_group_size;
  o.pin_memory = oo.pin_memory;
  o.fast_init = oo.fast_init;
  if (o.nvme) {
    offload::NvmeOptions& n = o.nvme_options;
    n.nvme_path = oo.nvme_path;
    n.json_key = "zero_optimization.offload_optimizer.nvme_path";
    n.job_id = swap_job_id(comm, device);
    n.rank = comm.rank();
    n.aio = {c.aio.block_size, static_cast<int>(c.aio.queue_depth),
             static_cast<int>(c.aio.intra_op_parallelism), c.aio.single_submit,
             c.aio.overlap_events};
    n.buffer_count = static_cast<int>(oo.buffer_count);
    n.pipeline_read = oo.pipeline_read;
    n.pipeline_write = oo.pipeline_write;
  }
  return offload::make_offload_optimizer(o);
}

}  // namespace zero::detail
