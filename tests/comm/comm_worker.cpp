// One rank of the multi-process comm tests (started by zerorun, mpirun or launch_local.sh):
// `collectives` checks every collective x dtype x shape exactly; `grid` the sub-communicators of
// a tensor x data x pipeline grid; `p2p` point-to-point batches; `timeout`, `p2p-timeout` and
// `env` modes below.
#include <zero/comm/host_topology.h>
#include <zero/comm/parallel_grid.h>
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace zero;

namespace {

int g_checks = 0;
int g_rank = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) throw std::runtime_error("check failed: " + what);
}

void expect_equal(const at::Tensor& got, const at::Tensor& want, const std::string& what) {
  ++g_checks;
  if (got.scalar_type() != want.scalar_type() || !at::equal(got, want)) {
    std::cerr << "rank " << g_rank << ": mismatch in " << what
              << "\n got:  " << got.to(at::kDouble).slice(0, 0, 16)
              << "\n want: " << want.to(at::kDouble).slice(0, 0, 16) << "\n";
    throw std::runtime_error("mismatch: " + what);
  }
}

const std::vector<at::ScalarType> kDtypes = {at::kFloat, at::kHalf, at::kBFloat16, at::kInt,
                                             at::kLong};

std::string name(at::ScalarType t) {
  return c10::toString(t);
}

// Integer-valued data, small enough that sums over 4 ranks are exact even in bf16 (< 256).
at::Tensor rank_data(int64_t n, int r, int w, int64_t offset = 0) {
  return at::arange(offset, offset + n, at::kLong).remainder(13).add(r * w);
}

std::vector<std::vector<int64_t>> count_patterns(int w) {
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> small, zeros(w, 0), large, one_owner(w, 0);
  for (int k = 0; k < w; ++k) {
    small.push_back((k * 7 + 3) % 5);                          // includes empty shards
    large.push_back(150000 + 997 * k + (k % 2 ? 0 : 300001));  // several 1 MiB segments, uneven
  }
  one_owner[w - 1] = 11;
  out = {small, zeros, large, one_owner};
  return out;
}

void check_all_reduce(Communicator& c, at::ScalarType dt, int64_t n) {
  const int r = c.rank(), w = c.world_size();
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    at::Tensor t = rank_data(n, r, w).to(dt);
    c.all_reduce(t, op)->wait();
    at::Tensor base = rank_data(n, 0, w);
    at::Tensor want = op == ReduceOp::kSum   ? base.mul(w).add(w * (w * (w - 1) / 2))
                      : op == ReduceOp::kAvg ? base.add(w * (w - 1) / 2)
                                             : base.add((w - 1) * w);
    expect_equal(
        t, want.to(dt),
        "all_reduce " + std::string(to_string(op)) + " " + name(dt) + " n=" + std::to_string(n));
  }
}

void check_reduce_scatter(Communicator& c, at::ScalarType dt, const std::vector<int64_t>& counts,
                          bool equal_api) {
  const int r = c.rank(), w = c.world_size();
  int64_t total = 0, offset = 0;
  for (int k = 0; k < w; ++k) {
    if (k == r) offset = total;
    total += counts[k];
  }
  for (InputUse use : {InputUse::kKeep, InputUse::kConsume}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      at::Tensor in = rank_data(total, r, w).to(dt);
      at::Tensor in_copy = in.clone();
      at::Tensor out = at::full({counts[r]}, -7, at::TensorOptions().dtype(dt));  // poison
      if (equal_api)
        c.reduce_scatter(in, out, op, use)->wait();
      else
        c.reduce_scatter_v(in, out, counts, op, use)->wait();
      at::Tensor base = rank_data(counts[r], 0, w, offset);
      at::Tensor want = op == ReduceOp::kSum   ? base.mul(w).add(w * (w * (w - 1) / 2))
                        : op == ReduceOp::kAvg ? base.add(w * (w - 1) / 2)
                                               : base.add((w - 1) * w);
      std::string what = std::string(equal_api ? "reduce_scatter " : "reduce_scatter_v ") +
                         to_string(op) + " " + name(dt) + " count=" + std::to_string(counts[r]) +
                         " total=" + std::to_string(total) +
                         (use == InputUse::kKeep ? " keep" : " consume");
      expect_equal(out, want.to(dt), what);
      if (use == InputUse::kKeep) expect_equal(in, in_copy, what + " (input untouched)");
    }
  }
}

void check_all_gather(Communicator& c, at::ScalarType dt, const std::vector<int64_t>& counts,
                      bool equal_api) {
  const int r = c.rank(), w = c.world_size();
  auto data = [&](int k) { return at::arange(counts[k], at::kLong).remainder(37).add(k * 50); };
  at::Tensor in = data(r).to(dt);
  int64_t total = 0;
  for (int64_t n : counts) total += n;
  at::Tensor out = at::full({total}, -3, at::TensorOptions().dtype(dt));
  if (equal_api)
    c.all_gather(in, out)->wait();
  else
    c.all_gather_v(in, out, counts)->wait();
  std::vector<at::Tensor> parts;
  for (int k = 0; k < w; ++k) parts.push_back(data(k));
  expect_equal(out, at::cat(parts).to(dt),
               std::string(equal_api ? "all_gather " : "all_gather_v ") + name(dt) +
                   " total=" + std::to_string(total));
}

void check_broadcast(Communicator& c, at::ScalarType dt, int64_t n) {
  for (int root = 0; root < c.world_size(); ++root) {
    at::Tensor want = at::arange(n, at::kLong).remainder(50).add(root).to(dt);
    at::Tensor t =
        c.rank() == root ? want.clone() : at::full({n}, -1, at::TensorOptions().dtype(dt));
    c.broadcast(t, root)->wait();
    expect_equal(
        t, want,
        "broadcast root=" + std::to_string(root) + " " + name(dt) + " n=" + std::to_string(n));
  }
}

// In place, as the stages call them: a reduce-scatter whose output is its own segment of the
// input, and an all-gather whose input is its own chunk of the output.
void check_aliased(Communicator& c, int64_t m) {
  const int w = c.world_size(), r = c.rank();
  at::Tensor buf = at::arange(w * m, at::kFloat) + r;
  at::Tensor want = (at::arange(w * m, at::kFloat) * w + w * (w - 1) / 2).narrow(0, r * m, m);
  at::Tensor mine = buf.narrow(0, r * m, m);
  c.reduce_scatter(buf, mine, ReduceOp::kSum)->wait();
  expect_equal(mine, want, "reduce_scatter into its own segment of the input");
  at::Tensor gathered = at::zeros({w * m}, at::kFloat);
  gathered.narrow(0, r * m, m).fill_(r);
  at::Tensor chunk = gathered.narrow(0, r * m, m);
  c.all_gather(chunk, gathered)->wait();
  std::vector<at::Tensor> parts;
  for (int k = 0; k < w; ++k) parts.push_back(at::full({m}, k, at::kFloat));
  expect_equal(gathered, at::cat(parts), "all_gather from its own chunk of the output");
  // Uneven: rank k contributes m + k elements at their offset.
  std::vector<int64_t> counts;
  int64_t offset = 0, total = 0;
  for (int k = 0; k < w; ++k) {
    counts.push_back(m + k);
    if (k < r) offset += m + k;
    total += m + k;
  }
  at::Tensor gathered_v = at::zeros({total}, at::kFloat);
  at::Tensor own = gathered_v.narrow(0, offset, counts[r]).fill_(r);
  c.all_gather_v(own, gathered_v, counts)->wait();
  parts.clear();
  for (int k = 0; k < w; ++k) parts.push_back(at::full({counts[k]}, k, at::kFloat));
  expect_equal(gathered_v, at::cat(parts), "all_gather_v from its own chunk of the output");
}

void check_everything(Communicator& c, bool large) {
  const int w = c.world_size();
  for (at::ScalarType dt : kDtypes) {
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{1000}})
      check_all_reduce(c, dt, n);
    if (large) check_all_reduce(c, dt, 700001);
    for (int64_t m : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{4099}}) {
      check_reduce_scatter(c, dt, std::vector<int64_t>(w, m), true);
      check_all_gather(c, dt, std::vector<int64_t>(w, m), true);
    }
    for (const auto& counts : count_patterns(w)) {
      if (!large && counts[0] > 100000) continue;
      check_reduce_scatter(c, dt, counts, false);
      check_all_gather(c, dt, counts, false);
    }
    for (int64_t n : {int64_t{0}, int64_t{3}, int64_t{5000}}) check_broadcast(c, dt, n);
  }
  for (int64_t m : {int64_t{1}, int64_t{3001}}) check_aliased(c, m);
  if (large) check_aliased(c, 300007);
  c.barrier()->wait();
}

// Many collectives in flight at once: they run in issue order and all complete.
void check_async(Communicator& c) {
  const int w = c.world_size();
  std::vector<at::Tensor> ts;
  std::vector<WorkHandle> works;
  for (int i = 0; i < 16; ++i) {
    ts.push_back(at::full({257}, i + c.rank(), at::kLong));
    works.push_back(c.all_reduce(ts.back(), ReduceOp::kSum));
  }
  works.push_back(c.barrier());
  for (auto& wk : works) wk->wait();
  for (auto& wk : works) wk->wait();  // safe twice
  for (int i = 0; i < 16; ++i) {
    expect(works[i]->is_completed() && !works[i]->error(), "async work completed without error");
    expect_equal(ts[i], at::full({257}, int64_t{i} * w + w * (w - 1) / 2, at::kLong),
                 "async all_reduce " + std::to_string(i));
  }
}

void check_usage_errors(Communicator& c) {
  at::Tensor d = at::zeros({4}, at::kDouble);
  bool thrown = false;
  try {
    c.all_reduce(d, ReduceOp::kSum);
  } catch (const UsageError&) {
    thrown = true;
  }
  expect(thrown, "float64 is rejected with UsageError");
  at::Tensor in = at::zeros({c.world_size() * 3 + 1}, at::kFloat), out = at::zeros({3}, at::kFloat);
  thrown = false;
  try {
    c.reduce_scatter(in, out, ReduceOp::kSum);
  } catch (const UsageError&) {
    thrown = true;
  }
  expect(thrown, "reduce_scatter size mismatch is rejected");
}

void check_groups(Communicator& world, const RankEnv& env) {
  const int w = world.world_size(), r = world.rank();
  // A fake node layout: 2 ranks per node when the world size is even, else 1.
  RankEnv layout = env;
  layout.local_world_size = w % 2 == 0 && w > 1 ? 2 : 1;
  layout.local_rank = r % layout.local_world_size;
  auto node = node_group(world, layout);
  auto cross = cross_node_group(world, layout);
  expect(node && node->world_size() == layout.local_world_size && node->rank() == layout.local_rank,
         "node_group shape");
  expect(cross && cross->world_size() == w / layout.local_world_size &&
             cross->rank() == r / layout.local_world_size,
         "cross_node_group shape");
  // Sum of world ranks inside each group.
  at::Tensor t = at::full({5}, r, at::kLong);
  node->all_reduce(t, ReduceOp::kSum)->wait();
  const int first = (r / layout.local_world_size) * layout.local_world_size;
  int64_t want = 0;
  for (int i = 0; i < layout.local_world_size; ++i) want += first + i;
  expect_equal(t, at::full({5}, want, at::kLong), "node_group all_reduce");
  t = at::full({5}, r, at::kLong);
  cross->all_reduce(t, ReduceOp::kSum)->wait();
  want = 0;
  for (int i = r % layout.local_world_size; i < w; i += layout.local_world_size) want += i;
  expect_equal(t, at::full({5}, want, at::kLong), "cross_node_group all_reduce");
  check_everything(*cross, false);

  // A group in reverse order that leaves rank 1 out (when there is one): ranks map by position.
  std::vector<int> ranks;
  for (int i = w - 1; i >= 0; --i)
    if (!(w > 2 && i == 1)) ranks.push_back(i);
  auto sub = world.new_group(ranks);
  const bool member = std::find(ranks.begin(), ranks.end(), r) != ranks.end();
  expect(bool(sub) == member, "new_group returns nullptr exactly on non-members");
  if (sub) {
    const int pos = static_cast<int>(std::find(ranks.begin(), ranks.end(), r) - ranks.begin());
    expect(sub->rank() == pos && sub->world_size() == static_cast<int>(ranks.size()),
           "new_group rank order");
    at::Tensor in = at::full({2}, r, at::kInt);
    at::Tensor out = at::zeros({2 * static_cast<int64_t>(ranks.size())}, at::kInt);
    sub->all_gather(in, out)->wait();
    std::vector<at::Tensor> parts;
    for (int k : ranks) parts.push_back(at::full({2}, k, at::kInt));
    expect_equal(out, at::cat(parts), "new_group all_gather order");
    check_everything(*sub, false);
  }
  world.barrier()->wait();
}

// --transport T: the world and a group made from it move their bytes through T.
int run_collectives(const RankEnv& env, const std::string& transport) {
  auto world = init_communicator(env);
  if (!transport.empty()) {
    std::vector<int> all(env.world_size);
    std::iota(all.begin(), all.end(), 0);
    auto again = world->new_group(all);
    expect(world->transport() == transport && again->transport() == transport,
           "transport is " + transport + " (world: " + world->transport() + ")");
  }
  check_everything(*world, true);
  check_async(*world);
  check_usage_errors(*world);
  check_groups(*world, env);
  world->barrier()->wait();
  std::cout << "rank " << env.rank << " of " << env.world_size << ": " << g_checks
            << " checks passed\n";
  return 0;
}

// grid --tp T --pp P: each of this rank's grid groups sums the world ranks of exactly the ranks
// GridLayout puts in it, in its order (an all_gather of world ranks).
int run_grid(const RankEnv& env, int tp, int pp) {
  auto world = init_communicator(env);
  const ParallelGrid grid = parallel_grid(world, GridSizes{tp, pp});
  const GridLayout& l = grid.layout();
  const GridCoord c = l.coord_of(env.rank);
  expect(grid.tensor_rank() == c.tensor && grid.data_rank() == c.data &&
             grid.pipeline_rank() == c.pipeline,
         "grid coordinates");
  auto check = [&](const std::shared_ptr<Communicator>& g,
                   const std::vector<std::vector<int>>& groups, const char* kind) {
    std::vector<int> mine;
    for (const auto& ranks : groups)
      if (std::find(ranks.begin(), ranks.end(), env.rank) != ranks.end()) mine = ranks;
    expect(g && g->world_size() == static_cast<int>(mine.size()), std::string(kind) + " size");
    at::Tensor in = at::full({1}, env.rank, at::kLong);
    at::Tensor out = at::zeros({static_cast<int64_t>(mine.size())}, at::kLong);
    g->all_gather(in, out)->wait();
    expect_equal(out, at::tensor(std::vector<int64_t>(mine.begin(), mine.end()), at::kLong),
                 std::string(kind) + " group members in order");
  };
  check(grid.tensor_group(), l.tensor_groups(), "tensor");
  check(grid.data_group(), l.data_groups(), "data");
  check(grid.pipeline_group(), l.pipeline_groups(), "pipeline");
  check(grid.model_group(), l.model_groups(), "model");
  world->barrier()->wait();
  std::cout << "rank " << env.rank << " " << grid.to_string() << ": " << g_checks
            << " checks passed\n";
  return 0;
}

// hosts --expect-hosts H: the world's hosts from every rank's host key (the launcher's node
// index), each host's ranks in a node group and the ranks of one local index in a cross-node
// group (when the hosts hold as many ranks each).
int run_hosts(const RankEnv& env, int expect_hosts) {
  auto world = init_communicator(env);
  const HostTopology t = discover_hosts(*world);
  expect(t.num_hosts() == expect_hosts, "hosts: " + t.to_string());
  const int host = t.host_of[env.rank];
  const HostGroups g = make_host_groups(*world, t);
  auto members = [&](const std::shared_ptr<Communicator>& group) {
    at::Tensor in = at::full({1}, env.rank, at::kLong);
    at::Tensor out = at::zeros({group->world_size()}, at::kLong);
    group->all_gather(in, out)->wait();
    return out;
  };
  const std::vector<int> same_host = t.ranks_on(host);
  expect(g.node && g.node->world_size() == static_cast<int>(same_host.size()), "node group size");
  expect_equal(members(g.node),
               at::tensor(std::vector<int64_t>(same_host.begin(), same_host.end()), at::kLong),
               "node group: this host's ranks");
  // Each rank's host key is its launcher's node index: the ranks of a node group share it.
  at::Tensor key = at::full({1}, host_key(), at::kLong);
  at::Tensor low = key.clone();
  g.node->all_reduce(low, ReduceOp::kMax)->wait();
  expect_equal(low, key, "node group: one host key");
  expect(t.uniform() == (g.cross_node != nullptr), "cross-node group exists when uniform");
  if (g.cross_node) {
    std::vector<int64_t> same_index;
    for (int h = 0; h < t.num_hosts(); ++h)
      same_index.push_back(t.ranks_on(h)[t.local_rank_of[env.rank]]);
    expect_equal(members(g.cross_node), at::tensor(same_index, at::kLong),
                 "cross-node group: this local index on every host");
  }
  // The hierarchical all-reduce against the flat one: integers exactly (sum, max, average), floats
  // to rounding; odd sizes pad the parts.
  if (g.cross_node || t.num_hosts() == 1) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}}) {
      for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
        at::Tensor ints = at::arange(n, at::kLong) * (env.rank + 3) - 5 * env.rank;
        at::Tensor want = ints.clone();
        world->all_reduce(want, op)->wait();
        hierarchical_all_reduce(g, ints, op);
        expect_equal(ints, want,
                     std::string("hierarchical all-reduce of int64 (") + to_string(op) + ")");
      }
      at::Tensor floats = at::sin(at::arange(n, at::kFloat) + env.rank);
      at::Tensor want = floats.clone();
      world->all_reduce(want, ReduceOp::kSum)->wait();
      hierarchical_all_reduce(g, floats, ReduceOp::kSum);
      expect(at::allclose(floats, want, 1e-5, 1e-6), "hierarchical all-reduce of float32");
    }
    // Reduce-scatter and all-gather with uneven segments (one empty), against the flat ones.
    std::vector<int64_t> counts;
    for (int r = 0; r < world->world_size(); ++r) counts.push_back(r == 1 ? 0 : 2 * r + 3);
    const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
    for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg}) {
      const at::Tensor input = at::arange(total, at::kLong) * (env.rank + 2) - 7 * env.rank;
      at::Tensor want = at::empty({counts[env.rank]}, at::kLong);
      at::Tensor got = at::empty({counts[env.rank]}, at::kLong);
      world->reduce_scatter_v(input.clone(), want, counts, op)->wait();
      hierarchical_reduce_scatter_v(g, input, got, counts, op);
      expect_equal(got, want, std::string("hierarchical reduce-scatter (") + to_string(op) + ")");
    }
    const at::Tensor mine = at::arange(counts[env.rank], at::kLong) + 100 * env.rank;
    at::Tensor want = at::empty({total}, at::kLong), got = at::full({total}, -1, at::kLong);
    world->all_gather_v(mine, want, counts)->wait();
    hierarchical_all_gather_v(g, mine, got, counts);
    expect_equal(got, want, "hierarchical all-gather");
  }
  world->barrier()->wait();
  std::cout << "rank " << env.rank << " " << t.to_string() << ": " << g_checks
            << " checks passed\n";
  return 0;
}

// allreduce-bytes --algo flat|hierarchical --mb M: ten all-reduces of M MiB of float32 (for the
// bytes the host links carry; the cluster test counts them).
int run_allreduce_bytes(const RankEnv& env, const std::string& algo, int64_t mib) {
  auto world = init_communicator(env);
  const HostGroups g = make_host_groups(*world, discover_hosts(*world));
  at::Tensor t = at::ones({mib * (1 << 20) / 4}, at::kFloat);
  for (int i = 0; i < 10; ++i) {
    if (algo == "flat")
      world->all_reduce(t, ReduceOp::kAvg)->wait();
    else
      hierarchical_all_reduce(g, t, ReduceOp::kAvg);
  }
  expect(at::all(t == 1).item<bool>(), "the averages of ones are ones");
  world->barrier()->wait();
  std::cout << "rank " << env.rank << " " << algo << " all-reduce: " << g_checks
            << " checks passed\n";
  return 0;
}

// timeout --mode never-joins|stops-joining --absent-rank R --timeout-ms T
int run_timeout(const RankEnv& env, const std::string& mode, int absent, int timeout_ms) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(timeout_ms);
  const auto nap = std::chrono::milliseconds(timeout_ms * 4 + 5000);
  if (mode == "never-joins" && env.rank == absent) {
    std::this_thread::sleep_for(nap);  // alive but never rendezvouses
    return 0;
  }
  auto world = init_communicator(env, opts);
  at::Tensor t = at::ones({1024}, at::kFloat);
  for (int i = 0; i < 5; ++i) world->all_reduce(t, ReduceOp::kSum)->wait();
  if (mode == "stops-joining" && env.rank == absent) {
    std::this_thread::sleep_for(nap);  // alive, connected, but skips the 6th collective
    return 0;
  }
  world->all_reduce(t, ReduceOp::kSum)->wait();  // seq 6 times out on the others
  std::cout << "rank " << env.rank << ": unexpectedly completed\n";
  return 0;
}

// peer-dies --victim V: every rank all-reduces 4 MiB again and again; after 20 of them rank V kills
// itself (SIGKILL) from another thread, in the middle of a later one. The others must fail naming
// it, long before the 60 s timeout.
int run_peer_dies(const RankEnv& env, int victim) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(60000);
  auto world = init_communicator(env, opts);
  std::cout << "rank " << env.rank << ": transport " << world->transport() << std::endl;
  at::Tensor t = at::ones({1 << 20}, at::kFloat);
  for (int i = 0; i < 100000; ++i) {
    if (i == 20 && env.rank == victim)
      std::thread([] {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::raise(SIGKILL);
      }).detach();
    world->all_reduce(t, ReduceOp::kAvg)->wait();
  }
  std::cout << "rank " << env.rank << ": unexpectedly completed\n";
  return 0;
}

// env --expect-source S --expect-world W: the detected env, then a real rendezvous + all_reduce.
int run_env(const RankEnv& env, const std::string& source, int world) {
  std::cout << "rank " << env.rank << " of " << env.world_size << " local " << env.local_rank << "/"
            << env.local_world_size << " source " << to_string(env.source) << " master "
            << env.master_addr << ":" << env.master_port << std::endl;
  expect(source == to_string(env.source), "launch source is " + source);
  expect(env.world_size == world, "world size is " + std::to_string(world));
  const char* ompi = std::getenv("OMPI_COMM_WORLD_RANK");
  if (source == "openmpi")
    expect(ompi && std::atoi(ompi) == env.rank, "rank equals OMPI_COMM_WORLD_RANK");
  auto c = init_communicator(env);
  at::Tensor t = at::full({3}, env.rank + 1, at::kLong);
  c->all_reduce(t, ReduceOp::kSum)->wait();
  expect_equal(t, at::full({3}, int64_t{world} * (world + 1) / 2, at::kLong), "env all_reduce");
  std::cout << "rank " << env.rank << ": env ok\n";
  return 0;
}

// p2p: point-to-point batches. A ring over every dtype and size (empty and several MiB
// included), each rank's batch listing its send and receive in the opposite order to its
// neighbour's; several messages to one peer in one batch land in order; ranks exchanging
// different numbers of messages between collectives on the same group (the collectives' tags
// stay in step); a batch issued before a collective and waited for after it; what is refused.
// p2p-timeout: rank 1 never sends; rank 0's receive fails with a TimeoutError naming the peer.
// Distinct per (sender, message) and exact in every dtype (values < 256).
at::Tensor message_data(int64_t n, int sender, int message, at::ScalarType dtype) {
  return at::arange(n, at::kLong)
      .remainder(97)
      .add(sender * 31 + message * 7)
      .remainder(251)
      .to(dtype);
}

void check_ring(Communicator& c) {
  const int r = c.rank(), w = c.world_size(), next = (r + 1) % w, prev = (r + w - 1) % w;
  int message = 0;
  for (at::ScalarType dt : kDtypes)
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, int64_t{700001}}) {
      const at::Tensor out = message_data(n, r, message, dt);
      at::Tensor in = at::empty({n}, dt);
      const P2POp send{P2POp::Kind::kSend, out, next}, recv{P2POp::Kind::kRecv, in, prev};
      // Even ranks list the send first, odd ranks the receive: opposite to each neighbour.
      c.batch_p2p(r % 2 == 0 ? std::vector<P2POp>{send, recv} : std::vector<P2POp>{recv, send})
          ->wait();
      expect(at::equal(in, message_data(n, prev, message, dt)),
             "ring " + std::string(c10::toString(dt)) + " n=" + std::to_string(n));
      ++message;
    }
}

// Three messages of different sizes to the next rank in one batch, and three single sends:
// the n-th send lands in the n-th receive.
void check_order(Communicator& c) {
  const int r = c.rank(), w = c.world_size(), next = (r + 1) % w, prev = (r + w - 1) % w;
  std::vector<P2POp> ops;
  std::vector<at::Tensor> got;
  for (int k = 0; k < 3; ++k) {
    got.push_back(at::empty({10 + k}, at::kFloat));
    ops.push_back({P2POp::Kind::kRecv, got.back(), prev});
  }
  for (int k = 0; k < 3; ++k)
    ops.push_back({P2POp::Kind::kSend, message_data(10 + k, r, 100 + k, at::kFloat), next});
  c.batch_p2p(ops)->wait();
  for (int k = 0; k < 3; ++k)
    expect(at::equal(got[k], message_data(10 + k, prev, 100 + k, at::kFloat)),
           "message " + std::to_string(k) + " of one batch in order");
  // Single sends and receives. A send may wait for its receive to be posted: odd ranks receive
  // first, so every chain of waiting sends ends at a receiving rank.
  std::vector<at::Tensor> singles;
  auto receive_all = [&] {
    for (int k = 0; k < 3; ++k) {
      singles.push_back(at::empty({4}, at::kLong));
      c.recv(singles.back(), prev)->wait();
    }
  };
  if (r % 2) receive_all();
  for (int k = 0; k < 3; ++k) c.send(message_data(4, r, 200 + k, at::kLong), next)->wait();
  if (r % 2 == 0) receive_all();
  for (int k = 0; k < 3; ++k)
    expect(at::equal(singles[k], message_data(4, prev, 200 + k, at::kLong)),
           "single message " + std::to_string(k) + " in order");
}

// Rank 0 sends rank 1 a different number of messages each round, between all-reduces on the
// same group: point-to-point ops must not shift the collectives' sequence.
void check_mixed(Communicator& c) {
  const int r = c.rank(), w = c.world_size();
  for (int round = 1; round <= 3; ++round) {
    for (int k = 0; k < round; ++k) {
      if (r == 0) c.send(message_data(8, 0, round * 10 + k, at::kInt), 1)->wait();
      if (r == 1) {
        at::Tensor in = at::empty({8}, at::kInt);
        c.recv(in, 0)->wait();
        expect(at::equal(in, message_data(8, 0, round * 10 + k, at::kInt)), "mixed message");
      }
    }
    at::Tensor t = at::full({5}, r + round, at::kLong);
    c.all_reduce(t, ReduceOp::kSum)->wait();
    expect(at::equal(t, at::full({5}, w * (w - 1) / 2 + w * round, at::kLong)),
           "all_reduce between uneven point-to-point rounds");
  }
  // Issued first, waited for last: the all_reduce runs after it in issue order.
  at::Tensor in = at::empty({3}, at::kFloat);
  const int next = (r + 1) % w, prev = (r + w - 1) % w;
  WorkHandle p2p = c.batch_p2p({{P2POp::Kind::kSend, message_data(3, r, 300, at::kFloat), next},
                                {P2POp::Kind::kRecv, in, prev}});
  at::Tensor t = at::ones({2}, at::kFloat);
  c.all_reduce(t, ReduceOp::kSum)->wait();
  p2p->wait();
  expect(at::equal(in, message_data(3, prev, 300, at::kFloat)) &&
             at::equal(t, at::full({2}, static_cast<float>(w))),
         "a batch issued before an all_reduce");
}

template <typename Fn>
void expect_usage_error(const std::string& what, const std::string& fragment, Fn&& fn) {
  try {
    fn();
  } catch (const UsageError& e) {
    expect(std::string(e.what()).find(fragment) != std::string::npos,
           what + ": the error says '" + fragment + "': " + e.what());
    return;
  }
  expect(false, what + " was not refused");
}

void check_refused(Communicator& c) {
  const int r = c.rank(), w = c.world_size();
  at::Tensor t = at::zeros({2}, at::kFloat);
  expect_usage_error("a send to itself", "cannot send to itself", [&] { c.send(t, r); });
  expect_usage_error("a receive from a rank outside", "outside the group", [&] { c.recv(t, w); });
  expect_usage_error("an empty batch", "no ops", [&] { c.batch_p2p({}); });
  expect_usage_error("a byte tensor", "batch_p2p: unsupported dtype Byte",
                     [&] { c.send(at::zeros({2}, at::kByte), (r + 1) % w); });
}

int run_p2p(const RankEnv& env) {
  auto world = init_communicator(env);
  if (world->world_size() > 1) {
    check_ring(*world);
    check_order(*world);
    check_mixed(*world);
    check_refused(*world);
  } else {  // nobody to talk to: only the refusals
    at::Tensor t = at::zeros({1}, at::kFloat);
    expect_usage_error("a send to itself", "cannot send to itself", [&] { world->send(t, 0); });
  }
  world->barrier()->wait();
  std::cout << "rank " << env.rank << " of " << env.world_size << ": " << g_checks
            << " point-to-point checks passed\n";
  return 0;
}

int run_p2p_timeout(const RankEnv& env) {
  CommOptions opts;
  opts.timeout = std::chrono::milliseconds(3000);
  auto world = init_communicator(env, opts);
  if (env.rank == 1) {  // alive and connected, but never sends
    std::this_thread::sleep_for(std::chrono::milliseconds(20000));
    return 0;
  }
  at::Tensor in = at::empty({16}, at::kFloat);
  world->recv(in, 1)->wait();
  std::cout << "rank " << env.rank << ": unexpectedly received\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  auto flag = [&](const std::string& name, const std::string& fallback) {
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == name) return args[i + 1];
    return fallback;
  };
  const std::string mode = args.empty() ? "collectives" : args[0];
  RankEnv env;
  try {
    env = detect_rank_env();
    g_rank = env.rank;
    if (mode == "collectives") return run_collectives(env, flag("--transport", ""));
    if (mode == "peer-dies") return run_peer_dies(env, std::stoi(flag("--victim", "1")));
    if (mode == "grid")
      return run_grid(env, std::stoi(flag("--tp", "1")), std::stoi(flag("--pp", "1")));
    if (mode == "timeout")
      return run_timeout(env, flag("--mode", "stops-joining"),
                         std::stoi(flag("--absent-rank", "1")),
                         std::stoi(flag("--timeout-ms", "3000")));
    if (mode == "p2p") return run_p2p(env);
    if (mode == "hosts") return run_hosts(env, std::stoi(flag("--expect-hosts", "1")));
    if (mode == "allreduce-bytes")
      return run_allreduce_bytes(env, flag("--algo", "flat"), std::stoll(flag("--mb", "16")));
    if (mode == "p2p-timeout") return run_p2p_timeout(env);
    if (mode == "env")
      return run_env(env, flag("--expect-source", "env"), std::stoi(flag("--expect-world", "1")));
    std::cerr << "comm_worker: unknown mode " << mode << "\n";
    return 2;
  } catch (const TimeoutError& e) {
    std::cerr << "rank " << env.rank << ": TimeoutError: " << e.what() << std::endl;
    return 3;
  } catch (const std::exception& e) {
    std::cerr << "rank " << env.rank << ": error: " << e.what() << std::endl;
    return 1;
  }
}
