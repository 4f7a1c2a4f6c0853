// What zero::initialize and zero::DistributedOptimizer share when they set up data parallelism:
// the world communicator for a model's device and the check that every rank built one layout.
#pragma once

#include <zero/comm/communicator.h>
#include <zero/comm/hierarchical_communicator.h>
#include <zero/core/layout.h>

#include <c10/core/Device.h>

#include <memory>

namespace torch::nn {
class Module;
}

namespace zero::detail {

// NCCL for a model on CUDA (on the parameters' device), Gloo otherwise.
std::shared_ptr<Communicator> communicator_for(const torch::nn::Module& model);

// All ranks must build the same layout: compares a hash of it before any sized collective;
// UsageError naming the ranks whose layout differs from rank 0's.
void check_same_layout(Communicator& comm, const FlatLayout& layout, at::Device device,
                       const char* caller);

// The communicator ZeRO reduces gradients over: `data` itself, or where the data group spans
// several hosts with as many ranks each (ZERO_HIERARCHICAL_ALLREDUCE=auto, the default) a
// HierarchicalCommunicator whose all-reduces, reduce-scatters and all-gathers of 64 KiB or more
// run within the host and across; "on": every one, also on one host (its node group is then the
// whole group), "off" never.
// Collective over `data` (a host discovery) unless off; UsageError for another value.
std::shared_ptr<Communicator> reducing_communicator(const std::shared_ptr<Communicator>& data);

}  // namespace zero::detail
