// hierarchical_reduce_scatter_v and hierarchical_all_gather_v (host_topology.h): the segments
// regrouped by local index ("columns": local index l's column holds the segments of every host's
// local rank l, in host order), one step within the host and one across; qgZ's quantized
// reduce-scatter likewise, its steps all-to-alls of int4 blocks.
#include <zero/comm/host_topology.h>

#include <zero/error.h>
#include <zero/kernels/quantize.h>

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

namespace {

// One int4 message: the packed values and their blocks' inverse scales.
struct Int4Message {
  at::Tensor packed;  // int8, two values per byte
  at::Tensor scales;  // fp32
};

Int4Message int4_message(int64_t numel, int64_t block) {
  return {at::empty({kernels::int4_packed_bytes(numel)}, at::kChar),
          at::empty({kernels::int4_block_count(numel, block)}, at::kFloat)};
}

Int4Message quantize_int4(const at::Tensor& values, int64_t block) {
  Int4Message m = int4_message(values.numel(), block);
  kernels::quantize_int4_symmetric_reference(values.data_ptr<float>(), values.numel(), block,
                                             m.packed.data_ptr<int8_t>(),
                                             m.scales.data_ptr<float>());
  return m;
}

// An all-to-all of int4 messages over `group`: pieces[p] (fp32, contiguous) goes to member p,
// quantized, except where exact[p] (bool, same numel; undefined: nowhere) is set: those values
// travel as fp32 (and count as zeros in their blocks). The piece every other member sends this
// one (`mine` marks its exact values) is dequantized and added into `sum`, which holds this
// member's own piece, never quantized. One batch of point-to-point ops.
void int4_all_to_all_add(Communicator& group, const std::vector<at::Tensor>& pieces,
                         const std::vector<at::Tensor>& exact, const at::Tensor& mine,
                         int64_t block, at::Tensor& sum) {
  const int me = group.rank(), n = group.world_size();
  const int64_t mine_exact = mine.defined() ? mine.sum().item<int64_t>() : 0;
  std::vector<Int4Message> out(n), in(n);
  std::vector<at::Tensor> out_exact(n), in_exact(n);
  std::vector<P2POp> ops;
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    in[p] = int4_message(sum.numel(), block);
    ops.push_back({P2POp::Kind::kRecv, in[p].packed, p});
    ops.push_back({P2POp::Kind::kRecv, in[p].scales, p});
    if (mine_exact > 0) {
      in_exact[p] = at::empty({mine_exact}, at::kFloat);
      ops.push_back({P2POp::Kind::kRecv, in_exact[p], p});
    }
  }
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    const bool some_exact = exact[p].defined() && exact[p].any().item<bool>();
    out[p] = quantize_int4(some_exact ? pieces[p].masked_fill(exact[p], 0) : pieces[p], block);
    ops.push_back({P2POp::Kind::kSend, out[p].packed, p});
    ops.push_back({P2POp::Kind::kSend, out[p].scales, p});
    if (some_exact) {
      out_exact[p] = pieces[p].masked_select(exact[p]);
      ops.push_back({P2POp::Kind::kSend, out_exact[p], p});
    }
  }
  if (!ops.empty()) group.batch_p2p(std::move(ops))->wait();
  for (int p = 0; p < n; ++p) {
    if (p == me) continue;
    kernels::dequantize_add_int4_symmetric_reference(in[p].packed.data_ptr<int8_t>(),
                                                     in[p].scales.data_ptr<float>(), sum.numel(),
                                                     block, sum.data_ptr<float>());
    if (mine_exact > 0) sum.masked_scatter_(mine, sum.masked_select(mine) + in_exact[p]);
  }
}

// `buffer` cut into consecutive pieces of `counts`.
std::vector<at::Tensor> pieces_of(const at::Tensor& buffer, const std::vector<int64_t>& counts) {
  std::vector<at::Tensor> out;
  int64_t at = 0;
  for (int64_t c : counts) {
    out.push_back(buffer.narrow(0, at, c));
    at += c;
  }
  return out;
}

}  // namespace

void quantized_hierarchical_reduce_scatter_v(const HostGroups& g, const at::Tensor& input,
                                             at::Tensor& output, const std::vector<int64_t>& counts,
                                             ReduceOp op, int64_t block, const at::Tensor& exact) {
  const char* name = "quantized_hierarchical_reduce_scatter_v";
  ZERO_CHECK(op == ReduceOp::kSum || op == ReduceOp::kAvg, UsageError, name, ": ", to_string(op),
             " (quantized gradients are summed or averaged)");
  ZERO_CHECK(input.device().is_cpu(), UsageError, name, ": a tensor on ", input.device().str(),
             "; the int4 kernels run on the CPU only");
  const int rank = rank_in(g, name);
  const Columns c = columns_of(g, counts, rank, name);
  at::Tensor columns = at::empty({input.numel()}, input.options().dtype(at::kFloat));
  regroup(c, counts, input.view({-1}).to(at::kFloat), columns, /*to_columns=*/true);
  // The exact values' mask in column order too (the same on every rank).
  at::Tensor exact_columns;
  std::vector<at::Tensor> exact_pieces(c.local), exact_segments(c.hosts);
  if (exact.defined()) {
    ZERO_CHECK(exact.scalar_type() == at::kBool && exact.numel() == input.numel(), UsageError, name,
               ": the exact-value mask must be bool with the input's ", input.numel(), " elements");
    exact_columns = at::empty({input.numel()}, at::kBool);
    regroup(c, counts, exact.view({-1}), exact_columns, /*to_columns=*/true);
    exact_pieces = pieces_of(exact_columns, c.column_counts);
  }
  // Within the host: column l to local rank l; this rank's column summed from every local rank.
  at::Tensor column = pieces_of(columns, c.column_counts)[c.my_local].clone();
  const at::Tensor exact_column = exact.defined() ? exact_pieces[c.my_local] : at::Tensor();
  int4_all_to_all_add(*g.node, pieces_of(columns, c.column_counts), exact_pieces, exact_column,
                      block, column);
  // Across the hosts: the column's segment of host h's rank (of this local index) to host h.
  at::Tensor mine = column;
  if (c.hosts > 1) {
    const std::vector<at::Tensor> segments = pieces_of(column, c.cross_counts);
    if (exact.defined()) exact_segments = pieces_of(exact_column, c.cross_counts);
    const int host = g.cross_node->rank();
    mine = segments[host].clone();
    int4_all_to_all_add(*g.cross_node, segments, exact_segments, exact_segments[host], block, mine);
  }
  if (op == ReduceOp::kAvg) mine.div_(static_cast<double>(counts.size()));
  output.view({-1}).copy_(mine);
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
