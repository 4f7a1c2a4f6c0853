// What zero::initialize and zero::DistributedOptimizer share when they set up data parallelism:
// the world communicator for a model's device and the check that every rank built one layout.
#pragma once

#include <zero/comm/communicator.h>
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

}  // namespace zero::detail
