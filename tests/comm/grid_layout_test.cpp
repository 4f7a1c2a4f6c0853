// GridLayout, the rank arithmetic of the tensor x data x pipeline grid, without processes:
// Megatron's order (tensor fastest, then data, then pipeline), every rank in exactly one group
// of each kind, and the errors for sizes that do not fit the world.
#include <catch2/catch.hpp>

#include <zero/comm/parallel_grid.h>
#include <zero/error.h>

#include <algorithm>
#include <set>

using zero::GridCoord;
using zero::GridLayout;
using zero::GridSizes;

namespace {

// Each rank of the world appears in exactly one group, and every group has `size` ranks.
void check_partition(const std::vector<std::vector<int>>& groups, int world, size_t size) {
  std::multiset<int> seen;
  for (const auto& g : groups) {
    CHECK(g.size() == size);
    seen.insert(g.begin(), g.end());
  }
  CHECK(static_cast<int>(seen.size()) == world);
  for (int r = 0; r < world; ++r) CHECK(seen.count(r) == 1);
}

}  // namespace

TEST_CASE("grid ranks follow Megatron's order: tensor fastest, then data, then pipeline",
          "[comm][grid]") {
  const GridLayout l(16, GridSizes{2, 2});
  CHECK(l.data_size() == 4);
  CHECK(l.rank_of({1, 0, 0}) == 1);
  CHECK(l.rank_of({0, 1, 0}) == 2);
  CHECK(l.rank_of({0, 0, 1}) == 8);
  for (int r = 0; r < 16; ++r) {
    const GridCoord c = l.coord_of(r);
    CHECK(l.rank_of(c) == r);
  }
  // Megatron-LM's initialize_model_parallel for world 16, tp 2, pp 2: tensor groups [0,1],
  // [2,3], ...; pipeline groups [0,8], [1,9], ...; data groups [0,2,4,6], [1,3,5,7], [8,...].
  CHECK((l.tensor_groups()[0] == std::vector<int>{0, 1}));
  CHECK((l.tensor_groups()[1] == std::vector<int>{2, 3}));
  CHECK((l.pipeline_groups()[0] == std::vector<int>{0, 8}));
  CHECK((l.pipeline_groups()[1] == std::vector<int>{1, 9}));
  CHECK((l.data_groups()[0] == std::vector<int>{0, 2, 4, 6}));
  CHECK((l.data_groups()[1] == std::vector<int>{1, 3, 5, 7}));
  CHECK((l.data_groups()[2] == std::vector<int>{8, 10, 12, 14}));
  CHECK((l.model_groups()[0] == std::vector<int>{0, 1, 8, 9}));
  CHECK(l.to_string() == "tp 2 x dp 4 x pp 2 (world 16)");
}

TEST_CASE("every rank is in exactly one group of each kind", "[comm][grid]") {
  for (int world : {1, 2, 4, 6, 8, 12}) {
    for (int tp : {1, 2, 3, 4}) {
      for (int pp : {1, 2, 3}) {
        if (world % (tp * pp) != 0) continue;
        const GridLayout l(world, GridSizes{tp, pp});
        const int dp = world / (tp * pp);
        check_partition(l.tensor_groups(), world, tp);
        check_partition(l.data_groups(), world, dp);
        check_partition(l.pipeline_groups(), world, pp);
        check_partition(l.model_groups(), world, tp * pp);
        // A rank's group of one kind varies only that kind's coordinate.
        for (const auto& g : l.data_groups())
          for (size_t k = 0; k < g.size(); ++k) {
            const GridCoord c = l.coord_of(g[k]), c0 = l.coord_of(g[0]);
            CHECK(c.data == static_cast<int>(k));
            CHECK((c.tensor == c0.tensor && c.pipeline == c0.pipeline));
          }
      }
    }
  }
}

TEST_CASE("sizes that do not fit the world are ConfigErrors naming them", "[comm][grid]") {
  CHECK_THROWS_WITH(GridLayout(6, GridSizes{4, 1}),
                    Catch::Contains("tensor-parallel size 4 x pipeline stages 1 = 4 does not "
                                    "divide the world of 6 ranks"));
  CHECK_THROWS_AS(GridLayout(8, GridSizes{0, 1}), zero::ConfigError);
  CHECK_THROWS_AS(GridLayout(8, GridSizes{2, 0}), zero::ConfigError);
  CHECK_THROWS_AS(GridLayout(4, GridSizes{2, 1}).coord_of(4), zero::UsageError);
}
