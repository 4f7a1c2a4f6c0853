// Which optimizer the ds_config asks for: the shard optimizer on the stage's device, or the
// offloaded CPU Adam over host memory or NVMe swap files (zero_optimization.offload_optimizer);
// and where stage 3 keeps its parameter shards (offload_param).
#pragma once

#include <zero/comm/communicator.h>
#include <zero/config/config.h>
#include <zero/core/optimizer.h>
#include <zero/core/param_store.h>
#include <zero/offload/swap_dir.h>

#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>

namespace zero::detail {

OptimizerOptions optimizer_options(const OptimizerConfig& o);
// The offload settings this build honours; ConfigError naming the key for the others.
void check_offload_config(const Config& c);
// This rank's swap folders nvme_path/<job id>/rank<N>/, one per nvme_path that offload_optimizer
// and offload_param name (the same path: one folder). Collective when NVMe offload is on (the
// ranks agree on the job id); empty otherwise.
struct SwapFolders {
  std::map<std::string, std::shared_ptr<offload::SwapDir>> by_path;
};
SwapFolders open_swap_folders(const Config& c, Communicator& comm, at::Device device);
// Stage 3 with offload_param: where the parameter shards live; null otherwise.
std::shared_ptr<ParamStore> make_param_store(const Config& c, const SwapFolders& folders, int rank);
std::unique_ptr<ShardOptimizer> make_optimizer(const Config& c, const SwapFolders& folders,
                                               int rank);

}  // namespace zero::detail
