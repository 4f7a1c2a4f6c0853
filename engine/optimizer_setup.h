// Which optimizer the ds_config asks for: the shard optimizer on the stage's device, or the
// offloaded CPU Adam over host memory or NVMe swap files (zero_optimization.offload_optimizer).
#pragma once

#include <zero/comm/communicator.h>
#include <zero/config/config.h>
#include <zero/core/optimizer.h>

#include <c10/core/Device.h>

#include <memory>

namespace zero::detail {

OptimizerOptions optimizer_options(const OptimizerConfig& o);
// The offload settings this build honours; ConfigError naming the key for the others.
void check_offload_config(const Config& c);
// Collective when NVMe offload is on (the ranks agree on the swap folder's job id).
std::unique_ptr<ShardOptimizer> make_optimizer(const Config& c, Communicator& comm,
                                               at::Device device);

}  // namespace zero::detail
