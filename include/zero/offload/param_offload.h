// Parameter offload (DeepSpeed's zero_optimization.offload_param, stage 3): the ParamStore
// that keeps this rank's parameter shards in host memory ("cpu") or, past max_in_cpu elements,
// in a swap file under nvme_path read and written with io_uring ("nvme").
#pragma once

#include <zero/core/param_store.h>
#include <zero/offload/aio.h>
#include <zero/offload/swap_dir.h>

#include <cstdint>
#include <memory>
#include <string>

namespace zero::offload {

struct ParamOffloadOptions {
  bool nvme = false;                      // false: every shard in host memory
  bool pin_memory = false;                // pinned through CUDA when this process has a GPU
  int64_t max_in_cpu_numel = 1000000000;  // nvme: the first this many elements stay in memory
  int buffer_count = 5;                   // nvme: shards in swap-in buffers at once (>= 1)
  int64_t buffer_numel = 100000000;       // nvme: elements per swap-in buffer
  // nvme: the rank's swap folder (shared with an NVMe optimizer store on the same path), the
  // aio settings and the rank, for the files and errors.
  std::shared_ptr<SwapDir> dir;
  AioOptions aio;
  int rank = 0;
};

std::shared_ptr<ParamStore> make_param_store(const ParamOffloadOptions& options);

}  // namespace zero::offload
