// Pipeline partitioning against DeepSpeed's: deepspeed/runtime/utils.py's partition_uniform and
// partition_balanced transcribed below line by line (numpy's arrays as vectors, np.inf as
// infinity) and compared over many layer counts and weights; the methods' names and errors.
#include <zero/engine/pipe/partition.h>
#include <zero/error.h>

#include <catch2/catch.hpp>

#include <limits>
#include <random>
#include <vector>

using namespace zero::pipe;

namespace deepspeed {

// def partition_uniform(num_items, num_parts):
std::vector<int> partition_uniform(int num_items, int num_parts) {
  std::vector<int> parts(num_parts + 1, 0);
  if (num_items <= num_parts) {
    for (int p = 0; p < num_parts + 1; ++p) parts[p] = std::min(p, num_items);
    return parts;
  }
  const int chunksize = num_items / num_parts;
  const int residual = num_items - (chunksize * num_parts);
  // parts = numpy.arange(0, (num_parts + 1) * chunksize, chunksize)
  for (int p = 0; p < num_parts + 1; ++p) parts[p] = p * chunksize;
  for (int i = 0; i < residual; ++i)
    for (int p = i + 1; p < num_parts + 1; ++p) parts[p] += 1;  // parts[i + 1:] += 1
  return parts;
}

// def partition_balanced(weights, num_parts):
std::vector<int> partition_balanced(const std::vector<double>& weights, int num_parts) {
  const int n = static_cast<int>(weights.size());
  const int m = num_parts;
  if (n <= m) return partition_uniform(n, m);
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> dp_max(n + 1, std::vector<double>(m + 1, inf));
  std::vector<std::vector<double>> dp_min(n + 1, std::vector<double>(m + 1, inf));
  std::vector<std::vector<double>> dp_cost(n + 1, std::vector<double>(m + 1, inf));
  std::vector<std::vector<int>> position(n + 1, std::vector<int>(m + 1, 0));
  std::vector<double> prefix_sum(n + 1, 0.0);
  for (int i = 1; i <= n; ++i) prefix_sum[i] = prefix_sum[i - 1] + weights[i - 1];  // cumsum
  dp_max[0][0] = 0;
  dp_cost[0][0] = 0;
  for (int i = 1; i < n + 1; ++i)
    for (int j = 1; j < std::min(i, m) + 1; ++j)
      for (int k = 0; k < i; ++k) {
        const double max_sum = std::max(dp_max[k][j - 1], prefix_sum[i] - prefix_sum[k]);
        const double min_sum = std::min(dp_min[k][j - 1], prefix_sum[i] - prefix_sum[k]);
        const double cost = max_sum - min_sum;
        if (dp_cost[i][j] >= cost) {
          dp_cost[i][j] = cost;
          dp_max[i][j] = max_sum;
          dp_min[i][j] = min_sum;
          position[i][j] = k;
        }
      }
  std::vector<int> parts{n};
  for (int i = m; i >= 1; --i) parts.push_back(position[parts.back()][i]);  // reversed(range)
  std::reverse(parts.begin(), parts.end());
  return parts;
}

}  // namespace deepspeed

TEST_CASE("partition_uniform is DeepSpeed's") {
  REQUIRE(partition_uniform(10, 4) == std::vector<int>{0, 3, 6, 8, 10});
  REQUIRE(partition_uniform(2, 4) == std::vector<int>{0, 1, 2, 2, 2});
  for (int layers = 0; layers <= 40; ++layers)
    for (int stages = 1; stages <= 9; ++stages) {
      INFO(layers << " layers, " << stages << " stages");
      REQUIRE(partition_uniform(layers, stages) == deepspeed::partition_uniform(layers, stages));
    }
}

TEST_CASE("partition_balanced is DeepSpeed's") {
  // Embedding, 4 equal blocks, head: the heavy ends get stages of their own where they can.
  REQUIRE(partition_balanced({50, 10, 10, 10, 10, 50}, 3) == std::vector<int>{0, 1, 5, 6});
  REQUIRE(deepspeed::partition_balanced({50, 10, 10, 10, 10, 50}, 3) ==
          std::vector<int>{0, 1, 5, 6});
  std::mt19937 rng(7);
  for (int trial = 0; trial < 400; ++trial) {
    const int layers = 1 + static_cast<int>(rng() % 24), stages = 1 + static_cast<int>(rng() % 8);
    std::vector<double> weights(layers);
    for (double& w : weights) w = static_cast<double>(rng() % (trial % 2 ? 5 : 100000));
    INFO("trial " << trial << ": " << layers << " layers, " << stages << " stages");
    const std::vector<int> parts = partition_balanced(weights, stages);
    REQUIRE(parts == deepspeed::partition_balanced(weights, stages));
    REQUIRE(parts.front() == 0);
    REQUIRE(parts.back() == layers);
    REQUIRE(std::is_sorted(parts.begin(), parts.end()));
  }
}

TEST_CASE("partition methods") {
  const std::vector<std::string> types{"Embedding",
                                       "TransformerLayer",
                                       "TransformerLayer",
                                       "TransformerLayer",
                                       "TransformerLayer",
                                       "LayerNorm",
                                       "Head"};
  const std::vector<int64_t> params{1000, 100, 100, 100, 100, 2, 1000};
  REQUIRE(partition_layers("uniform", params, types, 2) == partition_uniform(7, 2));
  REQUIRE(partition_layers("Parameters", params, types, 3) ==
          deepspeed::partition_balanced({1000, 100, 100, 100, 100, 2, 1000}, 3));
  // Only the transformer layers count: two each.
  const std::vector<int> by_type = partition_layers("type:transformer", params, types, 2);
  REQUIRE(by_type == std::vector<int>{0, 3, 7});
  REQUIRE(by_type == deepspeed::partition_balanced({0, 1, 1, 1, 1, 0, 0}, 2));
  REQUIRE_THROWS_WITH(partition_layers("type:attention", params, types, 2),
                      Catch::Contains("found no layer type matching 'attention'"));
  // Profile: balanced by the measured seconds, which the caller passes (one per layer).
  const std::vector<double> seconds{0.5, 2, 2, 2, 2, 0.1, 3};
  REQUIRE(partition_layers("profile", params, types, 3, seconds) ==
          deepspeed::partition_balanced({0.5, 2, 2, 2, 2, 0.1, 3}, 3));
  REQUIRE(partition_layers("profile", params, types, 3, seconds) !=
          partition_layers("parameters", params, types, 3));
  REQUIRE_THROWS_WITH(partition_layers("profile", params, types, 2),
                      Catch::Contains("0 layer times for 7 layers"));
  REQUIRE_THROWS_WITH(partition_layers("profiled", params, types, 2),
                      Catch::Contains("is not one of: uniform, parameters, type:REGEX, profile"));
  REQUIRE_THROWS_AS(partition_layers("type:(", params, types, 2), zero::ConfigError);
}
