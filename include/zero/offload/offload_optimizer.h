// Optimizer offload (DeepSpeed's zero_optimization.offload_optimizer): the fp32 masters and
// Adam moments of this rank's shards live in host memory ("cpu") or in swap files under
// nvme_path ("nvme"), the vectorized CPU Adam updates them sub-group by sub-group, and the
// updated parameters go back into the stage's compute-dtype shards.
#pragma once

#include <zero/core/optimizer.h>
#include <zero/offload/aio.h>
#include <zero/offload/swap_dir.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zero::offload {

struct NvmeOptions {
  // The rank's swap folder nvme_path/<job id>/rank<N>/ (shared with the parameter store when
  // offload_param uses the same nvme_path).
  std::shared_ptr<SwapDir> dir;
  int rank = 0;
  AioOptions aio;               // the ds_config's aio section
  int buffer_count = 4;         // sub-groups held in host memory at once (>= 1)
  bool pipeline_read = false;   // read sub-group k+1 while Adam runs on k
  bool pipeline_write = false;  // write sub-group k-1 back while Adam runs on k
};

struct OffloadOptimizerOptions {
  OptimizerOptions optimizer;            // Adam or AdamW
  bool nvme = false;                     // false: host memory
  int64_t sub_group_numel = 1000000000;  // zero_optimization.sub_group_size
  bool pin_memory = false;               // pinned through CUDA when this process has a GPU
  bool fast_init = false;                // nvme: new swap files read as zeros, not written
  NvmeOptions nvme_options;
};

// Adam/AdamW on host memory over the stage's shards; the shards handed to init_state carry no
// master (StageOptions::offload_optimizer) and their `compute` tensors receive the updates.
std::unique_ptr<ShardOptimizer> make_offload_optimizer(const OffloadOptimizerOptions& options);

// An empty host tensor: pinned when asked and a CUDA device is present, page-aligned otherwise.
at::Tensor host_empty(int64_t numel, at::ScalarType dtype, bool pin);

}  // namespace zero::offload
