// Optimizer and parameter-store construction from the ds_config, offload included. The offload
// checks follow DeepSpeed's rules (offload needs a ZeRO stage; offload_param only at stage 3)
// with our wording, and refuse what would change the math that we have
// not built (ratio, super_offload).
#include "optimizer_setup.h"

#include "save_load/io.h"

#include <zero/checkpoint/atomic_files.h>
#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>
#include <zero/offload/param_offload.h>

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

namespace {

// The keys an nvme device needs in zero_optimization.<section>.
void check_nvme_keys(const char* section, const std::string& device, const std::string& nvme_path,
                     int64_t buffer_count) {
  if (device != "nvme") return;
  ZERO_CHECK(!nvme_path.empty(), ConfigError, "zero_optimization.", section,
             ".device is \"nvme\" but nvme_path is not set; give a directory on a local disk");
  ZERO_CHECK(buffer_count >= 1, ConfigError, "zero_optimization.", section,
             ".buffer_count must be >= 1 for nvme, got ", buffer_count);
}

}  // namespace

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
    check_nvme_keys("offload_optimizer", oo.device, oo.nvme_path, oo.buffer_count);
  }
  // Below stage 3 the parser warned that offload_param has no effect (as DeepSpeed ignores it).
  if (op.device != "none" && z.stage == 3) {
    check_nvme_keys("offload_param", op.device, op.nvme_path, op.buffer_count);
    ZERO_CHECK(op.device != "nvme" || op.buffer_size >= 1, ConfigError,
               "zero_optimization.offload_param.buffer_size must be >= 1 for nvme, got ",
               op.buffer_size);
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

bool optimizer_on_nvme(const Config& c) {
  return c.zero_optimization.stage >= 1 && c.zero_optimization.offload_optimizer.device == "nvme";
}
bool params_on_nvme(const Config& c) {
  return c.zero_optimization.stage == 3 && c.zero_optimization.offload_param.device == "nvme";
}

offload::AioOptions aio_options(const Config& c) {
  return {c.aio.block_size, static_cast<int>(c.aio.queue_depth),
          static_cast<int>(c.aio.intra_op_parallelism), c.aio.single_submit, c.aio.overlap_events};
}

}  // namespace

SwapFolders open_swap_folders(const Config& c, Communicator& comm, at::Device device) {
  SwapFolders out;
  if (!optimizer_on_nvme(c) && !params_on_nvme(c)) return out;
  const std::string job_id = swap_job_id(comm, device);
  auto open = [&](const std::string& path, const char* key) {
    if (!out.by_path.count(path))
      out.by_path[path] = std::make_shared<offload::SwapDir>(
          path, job_id, comm.rank(), std::string("zero_optimization.") + key + ".nvme_path");
  };
  if (optimizer_on_nvme(c))
    open(c.zero_optimization.offload_optimizer.nvme_path, "offload_optimizer");
  if (params_on_nvme(c)) open(c.zero_optimization.offload_param.nvme_path, "offload_param");
  return out;
}

std::shared_ptr<ParamStore> make_param_store(const Config& c, const SwapFolders& folders,
                                             int rank) {
  const OffloadParamConfig& op = c.zero_optimization.offload_param;
  if (c.zero_optimization.stage != 3 || op.device == "none") return nullptr;
  offload::ParamOffloadOptions o;
  o.nvme = op.device == "nvme";
  o.pin_memory = op.pin_memory;
  o.max_in_cpu_numel = op.max_in_cpu;
  o.buffer_count = static_cast<int>(op.buffer_count);
  o.buffer_numel = op.buffer_size;
  if (o.nvme) o.dir = folders.by_path.at(op.nvme_path);
  o.aio = aio_options(c);
  o.rank = rank;
  return offload::make_param_store(o);
}

std::unique_ptr<ShardOptimizer> make_optimizer(const Config& c, const SwapFolders& folders,
                                               int rank) {
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
    n.dir = folders.by_path.at(oo.nvme_path);
    n.rank = rank;
    n.aio = aio_options(c);
    n.buffer_count = static_cast<int>(oo.buffer_count);
    n.pipeline_read = oo.pipeline_read;
    n.pipeline_write = oo.pipeline_write;
  }
  return offload::make_offload_optimizer(o);
}

}  // namespace zero::detail
