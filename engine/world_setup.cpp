// The world communicator for a model's device and the cross-rank layout check, shared by
// zero::initialize and zero::DistributedOptimizer.
#include "world_setup.h"

#include <zero/config/config.h>
#include <zero/core/stage.h>
#include <zero/engine/engine.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <vector>

namespace zero::detail {

std::shared_ptr<Communicator> communicator_for(const torch::nn::Module& model) {
  for (const auto& p : model.parameters(/*recurse=*/true))
    if (p.is_cuda()) return world_communicator(Backend::kNccl);
  return world_communicator(Backend::kGloo);
}

void check_same_layout(Communicator& comm, const FlatLayout& layout, at::Device device,
                       const char* caller) {
  const int world = comm.world_size();
  if (world == 1) return;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor mine = at::full({1}, static_cast<int64_t>(layout.hash()), opts);
  at::Tensor all = at::empty({world}, opts);
  comm.all_gather(mine, all)->wait();
  all = all.cpu();
  std::vector<int> differ;
  for (int r = 0; r < world; ++r)
    if (all[r].item<int64_t>() != all[0].item<int64_t>()) differ.push_back(r);
  if (differ.empty()) return;
  std::ostringstream ranks;
  for (int r : differ) ranks << (ranks.tellp() > 0 ? ", " : "") << r;
  throw UsageError(str(
      caller, ": the model or ZeRO config differs across ranks: the parameter layout of rank(s) ",
      ranks.str(), " differs from rank 0's (rank ", comm.rank(), ": ", layout.params().size(),
      " parameters, ", layout.total_padded_numel(),
      " elements); every rank must build the same model"));
}

std::shared_ptr<Communicator> reducing_communicator(const std::shared_ptr<Communicator>& data,
                                                    bool lead, bool quantized_gradients,
                                                    bool hierarchical_gathers) {
  const char* env = std::getenv("ZERO_HIERARCHICAL_ALLREDUCE");
  const std::string mode = env && *env ? env : "auto";
  ZERO_CHECK(mode == "auto" || mode == "on" || mode == "off", UsageError,
             "ZERO_HIERARCHICAL_ALLREDUCE='", mode, "': expected auto, on or off");
  ZERO_CHECK(!quantized_gradients || data->backend() == Backend::kGloo, UsageError,
             "zero_optimization.zero_quantized_gradients: qgZ's int4 kernels run on the CPU only "
             "so far; train on the CPU (Gloo), or turn qgZ off for a model on CUDA");
  const bool asked = quantized_gradients || hierarchical_gathers;
  if (data->world_size() == 1 || (mode == "off" && !asked)) return data;
  const HostTopology hosts = discover_hosts(*data);
  const bool qgz = quantized_gradients && hosts.uniform() && hosts.num_hosts() > 1;
  if (quantized_gradients && !qgz && lead)
    spdlog::warn(
        "[rank 0] zero_quantized_gradients has no effect on {}: it quantizes what crosses between "
        "hosts holding as many ranks each; gradients are reduce-scattered exactly",
        hosts.to_string());
  const int local = static_cast<int>(hosts.ranks_on(0).size());
  const bool spans = hosts.uniform() && local > 1 && hosts.num_hosts() > 1;
  const bool gathers = hierarchical_gathers && spans;
  if (hierarchical_gathers && !gathers && lead)
    spdlog::warn(
        "[rank 0] mics_hierarchical_params_gather has no effect: the shard group lies on {}; it "
        "splits gathers over several hosts with as many ranks each (more than one)",
        hosts.to_string());
  // NCCL's own algorithms already run within the node and across (its trees and rings follow the
  // topology it detects): "auto" leaves it flat.
  const bool nccl = data->backend() == Backend::kNccl;
  const bool hierarchical = mode != "off" && hosts.uniform() && local > 1 &&
                            (mode == "on" || (hosts.num_hosts() > 1 && !nccl));
  if (!hierarchical && !qgz && !gathers) return data;
  // qgZ or MiCS's gathers alone (the variable off): only those leave the flat communicator.
  const int64_t min_bytes = !hierarchical ? INT64_MAX : mode == "on" ? 0 : int64_t{64} << 10;
  if (lead && hierarchical)
    spdlog::info(
        "[rank 0] data group on {}: all-reduces, reduce-scatters and all-gathers of {} run "
        "hierarchically (within each host and across hosts)",
        hosts.to_string(), min_bytes ? "64 KiB or more" : "every size");
  if (lead && gathers)
    spdlog::info(
        "[rank 0] MiCS: parameter all-gathers of every size run hierarchically over the shard "
        "group's {}",
        hosts.to_string());
  if (lead && qgz)
    spdlog::info(
        "[rank 0] qgZ: gradients reduce-scattered in int4 blocks of {} values, all-to-all within "
        "each host and across the {}",
        kQgzBlockNumel, hosts.to_string());
  return std::make_shared<HierarchicalCommunicator>(data, make_host_groups(*data, hosts), min_bytes,
                                                    qgz ? kQgzBlockNumel : 0, gathers ? 0 : -1);
}

std::shared_ptr<Communicator> gathering_communicator(const std::shared_ptr<Communicator>& shard,
                                                     bool hierarchical_gathers) {
  std::vector<int> ranks(static_cast<size_t>(shard->world_size()));
  std::iota(ranks.begin(), ranks.end(), 0);
  return reducing_communicator(shard->new_group(ranks), /*lead=*/false,
                               /*quantized_gradients=*/false, hierarchical_gathers);
}

namespace {

// `data`'s ranks in consecutive groups of `size` (hpZ's and MiCS's groups): this rank's group,
// and in `spanning` the groups whose first and last ranks are on different hosts ("[0..3] [4..7]").
// Collective over `data`.
std::shared_ptr<Communicator> consecutive_group(Communicator& data, int size,
                                                const HostTopology& hosts, std::string* spanning) {
  std::shared_ptr<Communicator> mine;
  for (int first = 0; first < data.world_size(); first += size) {
    std::vector<int> ranks(static_cast<size_t>(size));
    for (int i = 0; i < size; ++i) ranks[static_cast<size_t>(i)] = first + i;
    if (auto group = data.new_group(ranks)) mine = group;
    if (hosts.host_of[static_cast<size_t>(first)] !=
        hosts.host_of[static_cast<size_t>(first + size - 1)])
      *spanning += str(spanning->empty() ? "" : " ", "[", first, "..", first + size - 1, "]");
  }
  ZERO_ASSERT(mine, "rank ", data.rank(), " in no group of ", size, " consecutive ranks");
  return mine;
}

}  // namespace

int shard_world(const Config& config, int data_world) {
  const ZeroOptimizationConfig& z = config.zero_optimization;
  if (z.stage != 3 || z.mics_shard_size <= 0) return data_world;
  ZERO_CHECK(z.mics_shard_size <= data_world && data_world % z.mics_shard_size == 0, ConfigError,
             "zero_optimization.mics_shard_size ", z.mics_shard_size,
             " does not divide the data-parallel group's ", data_world,
             " ranks; use the ranks per host, or another divisor of ", data_world);
  return static_cast<int>(z.mics_shard_size);
}

MicsGroups mics_groups(const Config& config, const std::shared_ptr<Communicator>& data) {
  const int world = data->world_size();
  const int size = shard_world(config, world);
  if (size == world) {
    if (size > 1 && config.zero_optimization.stage == 3 && data->rank() == 0)
      spdlog::info("[rank 0] MiCS: one shard group of all {} data-parallel ranks: plain stage 3",
                   size);
    return {data, nullptr};
  }
  const HostTopology hosts = discover_hosts(*data);  // collective
  std::string spanning;
  MicsGroups mine;
  mine.shard = consecutive_group(*data, size, hosts, &spanning);
  for (int i = 0; i < size; ++i) {
    std::vector<int> ranks;
    for (int r = i; r < world; r += size) ranks.push_back(r);
    if (auto group = data->new_group(ranks)) mine.replicas = group;
  }
  ZERO_ASSERT(mine.replicas, "rank ", data->rank(), " in no MiCS replica group");
  if (data->rank() == 0)
    spdlog::info(
        "[rank 0] MiCS: parameters, gradients and optimizer states sharded within {} groups of "
        "{} consecutive ranks{}, replicated across them (gradients averaged over {} replicas at "
        "each accumulation boundary)",
        world / size, size,
        spanning.empty() ? " (each within a host)" : str(" (", spanning, " span hosts)"),
        world / size);
  return mine;
}

LayoutOptions layout_options(const Config& config, int data_world) {
  const ZeroOptimizationConfig& z = config.zero_optimization;
  LayoutOptions o;
  o.world_size = shard_world(config, data_world);
  o.align_bytes = StageOptions{}.align_bytes;
  o.bucket_numel = z.reduce_bucket_size;
  // qwZ quantizes each shard in blocks of a multiple of 8 elements (DeepSpeed's kernel).
  if (z.stage == 3 && z.zero_quantized_weights) o.shard_multiple_numel = 8;
  return o;
}

std::shared_ptr<Communicator> secondary_partition_group(Communicator& data, int size) {
  const int world = data.world_size();
  size = std::min(size, world);
  ZERO_CHECK(world % size == 0, UsageError, "zero_optimization.zero_hpz_partition_size ", size,
             " does not divide the data-parallel group's ", world,
             " ranks; use the number of ranks per host (or a divisor of ", world, ")");
  const HostTopology hosts = discover_hosts(data);
  std::string spanning;
  std::shared_ptr<Communicator> mine = consecutive_group(data, size, hosts, &spanning);
  if (data.rank() == 0) {
    if (spanning.empty())
      spdlog::info("[rank 0] hpZ: secondary parameter groups of {} ranks, each within a host ({})",
                   size, hosts.to_string());
    else
      spdlog::warn(
          "[rank 0] hpZ: secondary parameter group(s) {} span hosts ({}), so the gathers within "
          "them cross the host links; zero_hpz_partition_size is best the ranks per host",
          spanning, hosts.to_string());
  }
  return mine;
}

std::string setup_zeropp(const Config& config, Communicator& data, const Communicator& reducing,
                         bool pipeline, StageOptions& sopts) {
  const ZeroOptimizationConfig& z = config.zero_optimization;
  const int data_size = data.world_size();
  std::string on;
  if (z.stage != 3 || data_size == 1) {
    sopts.quantized_weights = false;  // one rank gathers nothing
    return on;
  }
  const bool lead = data.rank() == 0;
  if (z.zero_hpz_partition_size > 1) {
    if (!pipeline) {
      sopts.secondary_group = secondary_partition_group(data, z.zero_hpz_partition_size);
      on = str("hpZ ", sopts.secondary_group->world_size());
    } else if (lead) {
      spdlog::warn(
          "zero_hpz_partition_size has no effect in a pipeline: a stage's parameters "
          "stay gathered for the whole batch, so there is no later gather to keep in the host");
    }
  }
  if (sopts.quantized_weights && pipeline) {
    sopts.quantized_weights = false;  // the layout keeps its multiple of 8: the same shards
    if (lead)
      spdlog::warn(
          "zero_quantized_weights has no effect in a pipeline: a stage's parameters are "
          "gathered whole for the batch, exactly");
  }
  if (sopts.quantized_weights) on += on.empty() ? "qwZ" : ", qwZ";
  const auto* h = dynamic_cast<const HierarchicalCommunicator*>(&reducing);
  if (h && h->quantized_block() > 0) on += on.empty() ? "qgZ" : ", qgZ";
  return on;
}

}  // namespace zero::detail
