// Which host each rank of a communicator runs on, and the two groups that topology-aware
// collectives (within a host, then across hosts) and ZeRO++'s hpZ / qgZ and MiCS work in.
#pragma once

#include <zero/comm/communicator.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace zero {

struct HostTopology {
  std::vector<int> host_of;        // per rank: its host, numbered in the order of their lowest rank
  std::vector<int> local_rank_of;  // per rank: its index among its host's ranks, in rank order
  int num_hosts() const;
  std::vector<int> ranks_on(int host) const;  // in rank order
  // Every host holds the same number of ranks (the cross-host groups exist).
  bool uniform() const;
  std::string to_string() const;  // "2 hosts: [0 1] [2 3]"
};

// This process's host key: the launcher's node index (CROSS_RANK, which zerorun and DeepSpeed's
// launcher set; SLURM_NODEID under srun; OMPI_COMM_WORLD_NODE_RANK is not one) or else a hash
// of the host name. Ranks with one key share a host.
int64_t host_key();

// Collective over `comm`: every rank's host_key() gathered, hosts numbered by their lowest rank.
HostTopology discover_hosts(Communicator& comm);

struct HostGroups {
  std::shared_ptr<Communicator> node;        // this rank's host's ranks, in rank order
  std::shared_ptr<Communicator> cross_node;  // the ranks of this local index on every host, in
                                             // host order; null when the hosts are not uniform
  int hosts = 1;
  HostTopology topology;  // what the groups were made from
};
// Collective over `comm` (its new_group calls, the same on every rank).
HostGroups make_host_groups(Communicator& comm, const HostTopology& topology);

// All-reduce in three steps: reduce-scatter within the host (node group), all-reduce of this
// rank's part across the hosts (cross-node group), all-gather within the host. A host's link then
// carries 2 (H - 1) / H of the tensor each way for H hosts, where a flat ring over W ranks placed
// host by host sends 2 (W - 1) / W of it over each of its H host crossings. Blocking; collective
// over every rank of the groups' communicator; needs uniform hosts (groups.cross_node, or one
// host). kAvg divides once after summing, as Communicator::all_reduce promises.
void hierarchical_all_reduce(const HostGroups& groups, at::Tensor& tensor, ReduceOp op);

// Reduce-scatter and all-gather likewise (Communicator's _v contracts: rank r's segment is
// counts[r] elements at the sum of the counts before it). Reduce-scatter: within the host, each
// local rank l gets the sum of the segments of every host's local rank l; across the hosts, those
// are split among the ranks of local index l. All-gather in reverse. Across H hosts each sends
// (H - 1) x N bytes over the host links where a ring sends H (W - 1) / W x N. The segments are
// regrouped by local index through a copy of the whole buffer. Blocking, like
// hierarchical_all_reduce.
void hierarchical_reduce_scatter_v(const HostGroups& groups, const at::Tensor& input,
                                   at::Tensor& output, const std::vector<int64_t>& counts,
                                   ReduceOp op);
void hierarchical_all_gather_v(const HostGroups& groups, const at::Tensor& input,
                               at::Tensor& output, const std::vector<int64_t>& counts);

// ZeRO++ qgZ: reduce-scatter_v's sum (kAvg: divided by the ranks after) through two all-to-alls
// of int4 blocks (kernels/quantize.h; `block` values per fp32 scale): within the host, every local
// rank l gets the segments of every host's local rank l from the others and adds them to its own;
// across the hosts, each of those sums goes to its rank, which adds them to its own. A rank's own
// part is never quantized; every other part once within the host and once across. Across H
// hosts each sends (H - 1) / W of the buffer at half a byte a value (and 4 bytes a block) where
// the reduce-scatter of hierarchical_reduce_scatter_v sends it at the dtype's width. Any numbers
// of values and hosts (an odd count of either too); uniform hosts (or one). Blocking; CPU.
// `exact` (bool, the input's numel, the same on every rank; undefined: none): values sent as
// fp32, never quantized (DeepSpeed's qgZ reduce-scatters 1-dimensional tensors plainly).
void quantized_hierarchical_reduce_scatter_v(const HostGroups& groups, const at::Tensor& input,
                                             at::Tensor& output, const std::vector<int64_t>& counts,
                                             ReduceOp op, int64_t block,
                                             const at::Tensor& exact = {});

}  // namespace zero
