// qgZ's quantized hierarchical reduce-scatter (host_topology.h) against the exact one, on one
// machine whose ranks are split into emulated hosts (the topology is given, not discovered):
// `qgz_worker H` runs world / H ranks per host. Every rank's segment within the int4 error bound
// of the exact sum and average, with uneven and empty segments; also one host, and odd host
// counts (3 hosts x 1, which DeepSpeed's qgZ cannot do).
#include <zero/comm/host_topology.h>
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <ATen/ATen.h>

#include <iostream>
#include <numeric>
#include <string>
#include <vector>

using namespace zero;

namespace {

int g_checks = 0;

void expect(bool ok, const std::string& what) {
  ++g_checks;
  if (!ok) throw std::runtime_error("check failed: " + what);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const RankEnv env = detect_rank_env();
    auto world = init_communicator(env);
    const int w = world->world_size(), rank = world->rank();
    const int hosts = argc > 1 ? std::stoi(argv[1]) : 1;
    ZERO_CHECK(w % hosts == 0, UsageError, hosts, " hosts for ", w, " ranks");
    // Ranks host by host, or interleaved (rank r on host r % H): the columns must not care.
    for (const bool interleaved : {false, true}) {
      HostTopology t;
      const int local = w / hosts;
      for (int r = 0; r < w; ++r) {
        t.host_of.push_back(interleaved ? r % hosts : r / local);
        t.local_rank_of.push_back(interleaved ? r / hosts : r % local);
      }
      const HostGroups g = make_host_groups(*world, t);
      for (const int64_t block : {int64_t{7}, int64_t{512}}) {
        std::vector<std::vector<int64_t>> patterns = {std::vector<int64_t>(w, 1000)};
        std::vector<int64_t> uneven;
        for (int r = 0; r < w; ++r) uneven.push_back(r == 1 ? 0 : 997 * (r + 1) + 3);
        patterns.push_back(uneven);
        for (const auto& counts : patterns) {
          const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
          at::manual_seed(100 + rank);
          const at::Tensor input = at::randn({total}) * (1e-3 * (rank + 1));
          for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg}) {
            at::Tensor want = at::empty({counts[rank]});
            at::Tensor got = at::full({counts[rank]}, 12345.0f);
            world->reduce_scatter_v(input.clone(), want, counts, op)->wait();
            at::Tensor largest = input.abs().max().reshape({1});
            world->all_reduce(largest, ReduceOp::kMax)->wait();
            quantized_hierarchical_reduce_scatter_v(g, input, got, counts, op, block);
            const std::string what = std::string(interleaved ? "interleaved " : "") +
                                     std::to_string(hosts) + " hosts, blocks of " +
                                     std::to_string(block) + ", " + to_string(op) + ", " +
                                     std::to_string(counts[rank]) + " values";
            if (counts[rank] == 0) continue;
            // Each of the other w - 1 contributions is quantized at most twice, each time within
            // 1/14 of its block's largest magnitude: a loose ceiling of 2 (w - 1) / 8 of the
            // largest input magnitude, far above what int4 rounding gives.
            const double scale = op == ReduceOp::kAvg ? 1.0 / w : 1.0;
            const double bound = 2.0 * (w - 1) / 8 * largest.item<double>() * w * scale;
            const double err = (got - want).abs().max().item<double>();
            expect(err <= bound,
                   what + ": error " + std::to_string(err) + " > " + std::to_string(bound));
            // And in the mean: int4 rounding is a few percent of the sum's norm, not more.
            const double rel = ((got - want).norm() / want.norm()).item<double>();
            expect(rel < 0.2, what + ": relative error " + std::to_string(rel));
            if (w > 1) expect(rel > 0, what + ": exact (nothing quantized?)");
            if (rank == 0 && block == 512 && op == ReduceOp::kAvg)
              std::cout << what << ": relative error " << rel << "\n";
          }
        }
      }
    }
    world->barrier()->wait();
    std::cout << "rank " << rank << ": " << g_checks << " checks passed\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "qgz_worker: " << e.what() << "\n";
    return 1;
  }
}
