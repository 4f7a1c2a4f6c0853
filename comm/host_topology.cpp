// discover_hosts and make_host_groups (host_topology.h).
#include <zero/comm/host_topology.h>

#include <zero/error.h>

#include <ATen/ATen.h>
#include <unistd.h>

#include <cstdlib>
#include <map>

namespace zero {

int HostTopology::num_hosts() const {
  int n = 0;
  for (int h : host_of) n = std::max(n, h + 1);
  return n;
}

std::vector<int> HostTopology::ranks_on(int host) const {
  std::vector<int> out;
  for (size_t r = 0; r < host_of.size(); ++r)
    if (host_of[r] == host) out.push_back(static_cast<int>(r));
  return out;
}

bool HostTopology::uniform() const {
  const size_t first = ranks_on(0).size();
  for (int h = 1; h < num_hosts(); ++h)
    if (ranks_on(h).size() != first) return false;
  return true;
}

std::string HostTopology::to_string() const {
  const int n = num_hosts();
  std::string out = std::to_string(n) + (n == 1 ? " host:" : " hosts:");
  for (int h = 0; h < n; ++h) {
    out += " [";
    const std::vector<int> ranks = ranks_on(h);
    for (size_t i = 0; i < ranks.size(); ++i) out += (i ? " " : "") + std::to_string(ranks[i]);
    out += "]";
  }
  return out;
}

int64_t host_key() {
  for (const char* name : {"CROSS_RANK", "SLURM_NODEID"})
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      const long long k = std::strtoll(v, &end, 10);
      ZERO_CHECK(end && *end == '\0' && k >= 0, UsageError, name, "='", v, "' is not a node index");
      return k;
    }
  char name[256] = {};
  ZERO_CHECK(gethostname(name, sizeof(name) - 1) == 0, InternalError, "gethostname failed");
  // FNV-1a, kept negative so it never equals a node index.
  uint64_t h = 1469598103934665603ULL;
  for (const char* p = name; *p; ++p) h = (h ^ static_cast<unsigned char>(*p)) * 1099511628211ULL;
  return -static_cast<int64_t>(h >> 2) - 1;
}

HostTopology discover_hosts(Communicator& comm) {
  const at::Device device =
      comm.backend() == Backend::kNccl ? at::Device(at::kCUDA) : at::Device(at::kCPU);
  const at::Tensor mine =
      at::full({1}, host_key(), at::TensorOptions().dtype(at::kLong).device(device));
  at::Tensor all = at::empty({comm.world_size()}, mine.options());
  comm.all_gather(mine, all)->wait();
  const at::Tensor keys = all.cpu();
  HostTopology t;
  std::map<int64_t, int> host_of_key;  // numbered in the order of their lowest rank
  std::map<int, int> ranks_seen;
  for (int r = 0; r < comm.world_size(); ++r) {
    const int64_t key = keys[r].item<int64_t>();
    auto it = host_of_key.emplace(key, static_cast<int>(host_of_key.size())).first;
    t.host_of.push_back(it->second);
    t.local_rank_of.push_back(ranks_seen[it->second]++);
  }
  return t;
}

HostGroups make_host_groups(Communicator& comm, const HostTopology& topology) {
  HostGroups g;
  g.hosts = topology.num_hosts();
  g.topology = topology;
  for (int h = 0; h < topology.num_hosts(); ++h)
    if (auto group = comm.new_group(topology.ranks_on(h))) g.node = group;
  if (!topology.uniform()) return g;
  const int local_size = static_cast<int>(topology.ranks_on(0).size());
  for (int l = 0; l < local_size; ++l) {
    std::vector<int> ranks;
    for (int h = 0; h < topology.num_hosts(); ++h) ranks.push_back(topology.ranks_on(h)[l]);
    if (auto group = comm.new_group(ranks)) g.cross_node = group;
  }
  return g;
}

void hierarchical_all_reduce(const HostGroups& groups, at::Tensor& tensor, ReduceOp op) {
  ZERO_CHECK(groups.node, UsageError, "hierarchical_all_reduce: no node group");
  const int local = groups.node->world_size();
  const int hosts = groups.hosts;
  ZERO_CHECK(hosts == 1 || groups.cross_node, UsageError, "hierarchical_all_reduce: the ", hosts,
             " hosts hold different numbers of ranks (no cross-node group)");
  ZERO_CHECK(tensor.is_contiguous(), UsageError,
             "hierarchical_all_reduce: a non-contiguous tensor");
  const int64_t n = tensor.numel(), part_numel = (n + local - 1) / local;
  const ReduceOp sum_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  // The host's ranks each reduce one part (the last padded with zeros, which sum and max keep).
  at::Tensor flat = tensor.view({-1});
  at::Tensor padded = part_numel * local == n
                          ? flat
                          : at::cat({flat, at::zeros({part_numel * local - n}, flat.options())});
  at::Tensor part = at::empty({part_numel}, flat.options());
  groups.node->reduce_scatter(padded, part, sum_op)->wait();
  if (hosts > 1) groups.cross_node->all_reduce(part, sum_op)->wait();
  groups.node->all_gather(part, padded)->wait();
  if (padded.data_ptr() != flat.data_ptr()) flat.copy_(padded.narrow(0, 0, n));
  if (op == ReduceOp::kAvg) {
    const int64_t world = int64_t{local} * hosts;
    if (at::isFloatingType(flat.scalar_type()))
      flat.div_(static_cast<double>(world));
    else
      flat.copy_(at::div(flat, world, "trunc"));
  }
}

}  // namespace zero
