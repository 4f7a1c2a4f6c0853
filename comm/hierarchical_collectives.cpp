// hierarchical_reduce_scatter_v and hierarchical_all_gather_v (host_topology.h): the segments
// regrouped by local index ("columns": local index l's column holds the segments of every host's
// local rank l, in host order), one step within the host and one across.
#include <zero/comm/host_topology.h>

#include <zero/error.h>

#include <ATen/ATen.h>

#include <numeric>

namespace zero {
namespace {

// Where each rank's segment sits in the buffer (rank order) and in the columns.
struct Columns {
  int hosts = 1, local = 1, my_local = 0;
  std::vector<int64_t> offset;         // per rank: its segment in the rank-ordered buffer
  std::vector<int64_t> column_offset;  // per rank: its segment in the column-ordered buffer
  std::vector<int64_t> column_counts;  // per local index: its column's elements
  std::vector<int64_t> cross_counts;   // per host: the segment of its rank of my local index
};

Columns columns_of(const HostGroups& g, const std::vector<int64_t>& counts, int my_rank,
                   const char* op) {
  const HostTopology& t = g.topology;
  const int world = static_cast<int>(t.host_of.size());
  ZERO_CHECK(static_cast<int>(counts.size()) == world, UsageError, op, ": ", counts.size(),
             " counts for ", world, " ranks");
  ZERO_CHECK(g.hosts == 1 || g.cross_node, UsageError, op, ": the ", g.hosts,
             " hosts hold different numbers of ranks (no cross-node group)");
  Columns c;
  c.hosts = g.hosts;
  c.local = world / g.hosts;
  c.my_local = t.local_rank_of[my_rank];
  c.offset.assign(world, 0);
  for (int r = 1; r < world; ++r) c.offset[r] = c.offset[r - 1] + counts[r - 1];
  c.column_offset.assign(world, 0);
  c.column_counts.assign(c.local, 0);
  int64_t at = 0;
  for (int l = 0; l < c.local; ++l)
    for (int h = 0; h < c.hosts; ++h) {
      const int r = t.ranks_on(h)[l];
      c.column_offset[r] = at;
      at += counts[r];
      c.column_counts[l] += counts[r];
    }
  for (int h = 0; h < c.hosts; ++h) c.cross_counts.push_back(counts[t.ranks_on(h)[c.my_local]]);
  return c;
}

// This rank's index in the topology the groups were made from: the rank of its host (the
// cross-node group's) with its local index (the node group's).
int rank_in(const HostGroups& g, const char* op) {
  ZERO_CHECK(g.node, UsageError, op, ": no node group");
  const HostTopology& t = g.topology;
  const int host = g.hosts == 1 ? 0 : g.cross_node->rank();
  for (size_t r = 0; r < t.host_of.size(); ++r)
    if (t.host_of[r] == host && t.local_rank_of[r] == g.node->rank()) return static_cast<int>(r);
  throw InternalError(std::string(op) + ": this rank is not in the host topology");
}

// The rank-ordered buffer `from` into column order (`to_columns`), or back.
void regroup(const Columns& c, const std::vector<int64_t>& counts, const at::Tensor& from,
             at::Tensor& to, bool to_columns) {
  for (size_t r = 0; r < counts.size(); ++r) {
    if (counts[r] == 0) continue;
    const int64_t src = to_columns ? c.offset[r] : c.column_offset[r];
    const int64_t dst = to_columns ? c.column_offset[r] : c.offset[r];
    to.narrow(0, dst, counts[r]).copy_(from.narrow(0, src, counts[r]));
  }
}

}  // namespace

void hierarchical_reduce_scatter_v(const HostGroups& g, const at::Tensor& input, at::Tensor& output,
                                   const std::vector<int64_t>& counts, ReduceOp op) {
  const int rank = rank_in(g, "hierarchical_reduce_scatter_v");
  const Columns c = columns_of(g, counts, rank, "hierarchical_reduce_scatter_v");
  const ReduceOp sum_op = op == ReduceOp::kAvg ? ReduceOp::kSum : op;
  at::Tensor columns = at::empty_like(input);
  regroup(c, counts, input.view({-1}), columns, /*to_columns=*/true);
  at::Tensor column = at::empty({c.column_counts[c.my_local]}, input.options());
  g.node->reduce_scatter_v(columns, column, c.column_counts, sum_op, InputUse::kConsume)->wait();
  if (c.hosts > 1)
    g.cross_node->reduce_scatter_v(column, output, c.cross_counts, sum_op, InputUse::kConsume)
        ->wait();
  else
    output.copy_(column);
  if (op == ReduceOp::kAvg) {
    const int64_t world = static_cast<int64_t>(counts.size());
    if (at::isFloatingType(output.scalar_type()))
      output.div_(static_cast<double>(world));
    else
      output.copy_(at::div(output, world, "trunc"));
  }
}

void hierarchical_all_gather_v(const HostGroups& g, const at::Tensor& input, at::Tensor& output,
                               const std::vector<int64_t>& counts) {
  const int rank = rank_in(g, "hierarchical_all_gather_v");
  const Columns c = columns_of(g, counts, rank, "hierarchical_all_gather_v");
  at::Tensor column = at::empty({c.column_counts[c.my_local]}, input.options());
  if (c.hosts > 1)
    g.cross_node->all_gather_v(input, column, c.cross_counts)->wait();
  else
    column.copy_(input.view({-1}));
  at::Tensor columns = at::empty({output.numel()}, input.options());
  g.node->all_gather_v(column, columns, c.column_counts)->wait();
  at::Tensor flat = output.view({-1});
  regroup(c, counts, columns, flat, /*to_columns=*/false);
}

}  // namespace zero
