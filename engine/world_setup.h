// What zero::initialize and zero::DistributedOptimizer share when they set up data parallelism:
// the world communicator for a model's device and the check that every rank built one layout.
#pragma once

#include <zero/comm/communicator.h>
#include <zero/comm/hierarchical_communicator.h>
#include <zero/core/layout.h>
#include <zero/core/stage.h>

#include <c10/core/Device.h>

#include <memory>
#include <string>

namespace torch::nn {
class Module;
}

namespace zero {
struct Config;
}

namespace zero::detail {

// NCCL for a model on CUDA (on the parameters' device), Gloo otherwise.
std::shared_ptr<Communicator> communicator_for(const torch::nn::Module& model);

// All ranks must build the same layout: compares a hash of it before any sized collective;
// UsageError naming the ranks whose layout differs from rank 0's.
void check_same_layout(Communicator& comm, const FlatLayout& layout, at::Device device,
                       const char* caller);

// The communicator ZeRO reduces gradients over: `data` itself, or where the data group spans
// several hosts with as many ranks each (ZERO_HIERARCHICAL_ALLREDUCE=auto, the default; Gloo
// only, as NCCL's own algorithms follow the topology) a HierarchicalCommunicator whose
// all-reduces, reduce-scatters and all-gathers of 64 KiB or more run within the host and across;
// "on": every one, also on one host (its node group is then the whole group) and on NCCL, "off"
// never.
// Collective over `data` (a host discovery) unless off; UsageError for another value.
// quantized_gradients (ZeRO++ qgZ, stage 3): across uniform hosts, whatever the variable says, its
// reduce-scatters are quantized (kQgzBlockNumel values per scale); on one host, or hosts of
// different sizes, a warning that it has no effect (DeepSpeed's qgZ also reduce-scatters plainly
// on one node).
constexpr int64_t kQgzBlockNumel = 256;
// hierarchical_gathers (MiCS's mics_hierarchical_params_gather): all-gathers of every size run
// hierarchically where `data` spans uniform hosts of several ranks each (a warning that it has no
// effect otherwise), whatever the variable says.
// `lead`: this rank says what it chose (the world's rank 0).
std::shared_ptr<Communicator> reducing_communicator(const std::shared_ptr<Communicator>& data,
                                                    bool lead, bool quantized_gradients = false,
                                                    bool hierarchical_gathers = false);

// Stage 3's parameter gathers' communicator (StageOptions::gather_group says why they need one
// of their own): a new group of `shard`'s ranks, made hierarchical where
// reducing_communicator(shard, ..., hierarchical_gathers) is, so gathers take the same paths.
// Collective over `shard`.
std::shared_ptr<Communicator> gathering_communicator(const std::shared_ptr<Communicator>& shard,
                                                     bool hierarchical_gathers);

// The ranks ZeRO shards over: the data group's, or with MiCS at stage 3 (mics_shard_size > 0)
// that many. ConfigError when the size does not divide the data group.
int shard_world(const Config& config, int data_world);

// MiCS's groups, as DeepSpeed's create_mics_comm_groups makes them: shard groups of
// shard_world() consecutive data ranks, and replica groups of the ranks at the same place in each
// shard group; this rank's. Without MiCS: {data, null}. Collective over `data`.
struct MicsGroups {
  std::shared_ptr<Communicator> shard;
  std::shared_ptr<Communicator> replicas;
};
MicsGroups mics_groups(const Config& config, const std::shared_ptr<Communicator>& data);

// How the config lays out the flat buffers of a data group of `data_world` ranks (over
// shard_world() of them: the engine's layout, and the shards zero::Init makes, which must match).
LayoutOptions layout_options(const Config& config, int data_world);

// hpZ's secondary group (zero_hpz_partition_size): `data`'s ranks in consecutive groups of
// min(size, world) ranks, as DeepSpeed's _create_zero_param_parallel_group makes them; this rank's
// group. UsageError when the size does not divide the data group; a warning when a group spans
// hosts (its gathers then cross the host links). Collective over `data`.
std::shared_ptr<Communicator> secondary_partition_group(Communicator& data, int size);

// ZeRO++ at stage 3 as far as it takes effect: hpZ's secondary group into sopts, qwZ left on
// (sopts.quantized_weights, from stage_options) unless in a pipeline, whose stages hold their
// parameters gathered exactly for the batch (a warning on rank 0 for each feature it voids).
// Returns what is on, e.g. "hpZ 2, qwZ, qgZ" (empty: nothing; qgZ when `reducing` quantizes).
// Collective over `data` with hpZ.
std::string setup_zeropp(const Config& config, Communicator& data, const Communicator& reducing,
                         bool pipeline, StageOptions& sopts);

}  // namespace zero::detail
