// The world communicator for a model's device and the cross-rank layout check, shared by
// zero::initialize and zero::DistributedOptimizer.
#include "world_setup.h"

#include <zero/engine/engine.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <cstdlib>
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

std::shared_ptr<Communicator> reducing_communicator(const std::shared_ptr<Communicator>& data) {
  const char* env = std::getenv("ZERO_HIERARCHICAL_ALLREDUCE");
  const std::string mode = env && *env ? env : "auto";
  ZERO_CHECK(mode == "auto" || mode == "on" || mode == "off", UsageError,
             "ZERO_HIERARCHICAL_ALLREDUCE='", mode, "': expected auto, on or off");
  if (mode == "off" || data->world_size() == 1) return data;
  const HostTopology hosts = discover_hosts(*data);
  const int local = static_cast<int>(hosts.ranks_on(0).size());
  if (!hosts.uniform() || local == 1 || (mode == "auto" && hosts.num_hosts() == 1)) return data;
  const int64_t min_bytes = mode == "on" ? 0 : int64_t{64} << 10;
  if (data->rank() == 0)
    spdlog::info(
        "[rank 0] data group on {}: all-reduces, reduce-scatters and all-gathers of {} run "
        "hierarchically (within each host and across hosts)",
        hosts.to_string(), min_bytes ? "64 KiB or more" : "every size");
  return std::make_shared<HierarchicalCommunicator>(data, make_host_groups(*data, hosts),
                                                    min_bytes);
}

}  // namespace zero::detail
