// FlatLayout unit tests: exhaustive checks of groups, shards, pieces and buckets over many
// parameter sets and world sizes 1-8, plus hand-checked cases (odd sizes, 1-element bias).
#include <zero/core/layout.h>
#include <zero/error.h>

#include <catch2/catch.hpp>

#include <random>
#include <set>

using namespace zero;

namespace {

// Every invariant the stages rely on, checked for one layout.
void check_invariants(const FlatLayout& layout) {
  const int world = layout.world_size();
  const auto& params = layout.params();
  std::vector<int> seen(params.size(), 0);
  for (size_t gi = 0; gi < layout.groups().size(); ++gi) {
    const Group& g = layout.groups()[gi];
    REQUIRE(g.padded_numel % world == 0);
    REQUIRE(g.shard_numel * world == g.padded_numel);
    REQUIRE(g.padded_numel >= g.used_numel);
    const int64_t align = std::max<int64_t>(1, 16 / float_type_bytes(g.dtype));
    REQUIRE(g.shard_numel % align == 0);
    int64_t prev_end = 0;
    for (int pi : g.params) {
      const ParamSlot& s = layout.slots()[pi];
      REQUIRE(s.group == (int)gi);
      REQUIRE(s.buffer.numel() == params[pi].numel);
      REQUIRE(s.buffer.begin >= prev_end);  // no overlap, order kept
      REQUIRE(s.buffer.begin % align == 0);
      REQUIRE(params[pi].dtype == g.dtype);
      prev_end = s.buffer.end;
      seen[pi]++;
      // Pieces over all ranks tile the parameter exactly once, in order.
      int64_t covered = 0;
      for (int r = 0; r < world; ++r) {
        auto piece = layout.shard_piece(pi, r);
        if (!piece) continue;
        REQUIRE(piece->in_param.begin == covered);
        REQUIRE(piece->in_param.numel() == piece->in_shard.numel());
        REQUIRE(piece->in_shard.begin >= 0);
        REQUIRE(piece->in_shard.end <= g.shard_numel);
        REQUIRE(s.buffer.begin + piece->in_param.begin ==
                r * g.shard_numel + piece->in_shard.begin);
        covered = piece->in_param.end;
      }
      REQUIRE(covered == params[pi].numel);
    }
    REQUIRE(prev_end == g.used_numel);
    // Buckets tile the group's parameters in order, each within the capacity unless it holds
    // a single parameter larger than the capacity.
    std::vector<int> bucket_params;
    for (int bi : g.buckets) {
      const Bucket& b = layout.buckets()[bi];
      REQUIRE(b.group == (int)gi);
      REQUIRE(!b.params.empty());
      const int64_t cap = layout.options().bucket_numel;
      if (cap > 0 && b.params.size() > 1) REQUIRE(b.buffer.numel() <= cap);
      REQUIRE(b.buffer.begin == layout.slots()[b.params.front()].buffer.begin);
      REQUIRE(b.buffer.end == layout.slots()[b.params.back()].buffer.end);
      for (int pi : b.params) {
        REQUIRE(layout.slots()[pi].bucket == bi);
        bucket_params.push_back(pi);
      }
      auto counts = layout.bucket_counts(bi);
      int64_t sum = 0;
      for (int r = 0; r < world; ++r) {
        REQUIRE(counts[r] >= 0);
        REQUIRE(counts[r] == layout.bucket_shard_range(bi, r).numel());
        sum += counts[r];
      }
      REQUIRE(sum == b.buffer.numel());
    }
    REQUIRE(bucket_params == g.params);
  }
  for (int s : seen) REQUIRE(s == 1);
}

}  // namespace

TEST_CASE("Range intersect and relative_to") {
  BufferRange a{10, 20}, b{15, 30}, c{20, 25};
  REQUIRE(a.intersect(b) == BufferRange{15, 20});
  REQUIRE(a.intersect(c).empty());
  REQUIRE(a.numel() == 10);
  REQUIRE(a.relative_to<ShardSpace>(10) == ShardRange{0, 10});
  REQUIRE(a.contains(19));
  REQUIRE(!a.contains(20));
}

TEST_CASE("hand-checked layout: awkward sizes on 3 ranks") {
  // weight 7x5=35, bias 1, big 100 (larger than a shard), bias 3.
  std::vector<ParamSpec> specs = {{"w", 35}, {"b", 1}, {"big", 100}, {"b2", 3}};
  LayoutOptions opt;
  opt.world_size = 3;
  opt.bucket_numel = 50;
  FlatLayout layout = FlatLayout::build(specs, opt);
  REQUIRE(layout.groups().size() == 1);
  const Group& g = layout.groups()[0];
  // offsets: w [0,35), b [36,37), big [40,140), b2 [140,143); used 143; align 4 -> 12 | padded
  REQUIRE(layout.slots()[0].buffer == BufferRange{0, 35});
  REQUIRE(layout.slots()[1].buffer == BufferRange{36, 37});
  REQUIRE(layout.slots()[2].buffer == BufferRange{40, 140});
  REQUIRE(layout.slots()[3].buffer == BufferRange{140, 143});
  REQUIRE(g.used_numel == 143);
  REQUIRE(g.padded_numel == 144);
  REQUIRE(g.shard_numel == 48);
  // big spans all three shards
  REQUIRE(layout.shard_piece(2, 0)->in_param == ParamRange{0, 8});
  REQUIRE(layout.shard_piece(2, 1)->in_param == ParamRange{8, 56});
  REQUIRE(layout.shard_piece(2, 2)->in_param == ParamRange{56, 100});
  REQUIRE(layout.shard_piece(2, 2)->in_shard == ShardRange{0, 44});
  REQUIRE(!layout.shard_piece(0, 1));
  REQUIRE(layout.shard_piece(1, 0)->in_shard == ShardRange{36, 37});
  // buckets: {w, b} (37 <= 50), {big} alone (over capacity), {b2}
  REQUIRE(layout.buckets().size() == 3);
  REQUIRE(layout.buckets()[1].params == std::vector<int>{2});
  REQUIRE(layout.bucket_counts(1) == std::vector<int64_t>{8, 48, 44});
  REQUIRE(layout.bucket_counts(2) == std::vector<int64_t>{0, 0, 3});
  REQUIRE(layout.bucket_shard_range(2, 2) == ShardRange{44, 47});
  check_invariants(layout);
}

TEST_CASE("empty shards: more ranks than elements") {
  std::vector<ParamSpec> specs = {{"bias", 1}};
  LayoutOptions opt;
  opt.world_size = 7;
  FlatLayout layout = FlatLayout::build(specs, opt);
  const Group& g = layout.groups()[0];
  REQUIRE(g.shard_numel == 4);  // aligned shards, ranks 1..6 hold padding only
  REQUIRE(layout.shard_piece(0, 0));
  for (int r = 1; r < 7; ++r) REQUIRE(!layout.shard_piece(0, r));
  check_invariants(layout);
}

TEST_CASE("groups by unit, persistence and dtype") {
  std::vector<ParamSpec> specs = {{"a", 10, FloatType::kFloat32, 1},
                                  {"b", 10, FloatType::kFloat16, 1},
                                  {"c", 3, FloatType::kFloat32, 2},
                                  {"d", 5, FloatType::kFloat32, 1},
                                  {"e", 2, FloatType::kFloat32, 1, true}};
  LayoutOptions opt;
  opt.world_size = 2;
  FlatLayout layout = FlatLayout::build(specs, opt);
  REQUIRE(layout.groups().size() == 4);
  REQUIRE(layout.groups()[0].params == std::vector<int>{0, 3});
  REQUIRE(layout.groups()[1].dtype == FloatType::kFloat16);
  REQUIRE(layout.groups()[1].shard_numel % 8 == 0);
  REQUIRE(layout.groups()[3].persistent);
  check_invariants(layout);
}

TEST_CASE("exhaustive: random parameter sets, world sizes 1-8, bucket sizes") {
  std::mt19937 rng(1234);
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<ParamSpec> specs;
    const int n = 1 + (int)(rng() % 12);
    for (int i = 0; i < n; ++i) {
      ParamSpec p;
      p.name = "p" + std::to_string(i);
      const int kind = rng() % 4;
      p.numel = kind == 0   ? 1
                : kind == 1 ? 1 + rng() % 17
                : kind == 2 ? 1 + rng() % 300
                            : 1000 + rng() % 5000;
      p.dtype = (rng() % 3 == 0) ? FloatType::kBFloat16 : FloatType::kFloat32;
      p.unit = rng() % 3;
      p.persistent = rng() % 5 == 0;
      specs.push_back(p);
    }
    for (int world = 1; world <= 8; ++world) {
      for (int64_t bucket : {0, 1, 64, 1000}) {
        LayoutOptions opt;
        opt.world_size = world;
        opt.bucket_numel = bucket;
        check_invariants(FlatLayout::build(specs, opt));
      }
    }
  }
}

TEST_CASE("hash distinguishes models and world sizes; rejects empty params") {
  LayoutOptions opt;
  opt.world_size = 2;
  auto h1 = FlatLayout::build({{"a", 10}, {"b", 3}}, opt).hash();
  REQUIRE(h1 == FlatLayout::build({{"a", 10}, {"b", 3}}, opt).hash());
  REQUIRE(h1 != FlatLayout::build({{"a", 10}, {"b", 4}}, opt).hash());
  REQUIRE(h1 != FlatLayout::build({{"a", 10}, {"c", 3}}, opt).hash());
  opt.world_size = 3;
  REQUIRE(h1 != FlatLayout::build({{"a", 10}, {"b", 3}}, opt).hash());
  REQUIRE_THROWS_AS(FlatLayout::build({{"a", 0}}, opt), UsageError);
}
