// zero::DistributedSampler: each optimizer step's global batch is the same samples whatever the
// data-parallel size, the ranks' micro-batches split it without overlap, the position survives a
// state round trip into a sampler of another size, epochs roll over to new permutations, and a
// mismatching or mid-step state is refused.
#include <catch2/catch.hpp>

#include <zero/engine/distributed_sampler.h>
#include <zero/error.h>

#include <algorithm>
#include <memory>
#include <set>
#include <vector>

using zero::DistributedSampler;

namespace {

// The samples of the next optimizer step over all `size` ranks (one sampler per rank), sorted.
std::vector<int64_t> global_step(std::vector<std::unique_ptr<DistributedSampler>>& ranks,
                                 int64_t accumulation) {
  std::vector<int64_t> all;
  for (int64_t m = 0; m < accumulation; ++m)
    for (auto& r : ranks) {
      const std::vector<int64_t> mine = r->next();
      all.insert(all.end(), mine.begin(), mine.end());
    }
  std::sort(all.begin(), all.end());
  return all;
}

std::vector<std::unique_ptr<DistributedSampler>> samplers(int64_t n, int64_t micro,
                                                          int64_t accumulation, int size,
                                                          uint64_t seed = 7) {
  std::vector<std::unique_ptr<DistributedSampler>> out;
  for (int r = 0; r < size; ++r)
    out.push_back(std::make_unique<DistributedSampler>(n, micro, accumulation, r, size,
                                                       DistributedSampler::Options{seed, true}));
  return out;
}

}  // namespace

TEST_CASE("each step's global batch is the epoch order's next block, split without overlap") {
  auto four = samplers(100, 3, 2, 4);  // global batch 24: 4 steps per epoch, 4 samples dropped
  const std::vector<int64_t> order = four[0]->epoch_order(0);
  REQUIRE(std::set<int64_t>(order.begin(), order.end()).size() == 100);
  for (int step = 0; step < 4; ++step) {
    const std::vector<int64_t> got = global_step(four, 2);
    std::vector<int64_t> want(order.begin() + step * 24, order.begin() + (step + 1) * 24);
    std::sort(want.begin(), want.end());
    CHECK(got == want);  // no sample twice (sorted equal to 24 distinct ones), none skipped
  }
  CHECK(four[0]->epoch() == 1);
  CHECK(four[0]->position() == 0);
  CHECK(four[0]->epoch_order(1) != order);  // a new permutation each epoch
}

TEST_CASE("the global batches do not depend on the data-parallel size") {
  auto four = samplers(100, 3, 2, 4);
  auto two = samplers(100, 3, 4, 2);  // the same global batch of 24 over 2 ranks
  auto one = samplers(100, 6, 4, 1);
  for (int step = 0; step < 9; ++step) {  // across two epoch boundaries
    const std::vector<int64_t> a = global_step(four, 2);
    CHECK(global_step(two, 4) == a);
    CHECK(global_step(one, 4) == a);
  }
}

TEST_CASE("a restart at another size continues at the saved sample") {
  auto four = samplers(100, 3, 2, 4);
  auto uninterrupted = samplers(100, 3, 2, 4);
  for (int step = 0; step < 3; ++step) {
    global_step(four, 2);
    global_step(uninterrupted, 2);
  }
  const nlohmann::json state = four[0]->state();
  CHECK(state["position"] == 72);
  auto two = samplers(100, 3, 4, 2);
  for (auto& r : two) r->load_state(state);
  for (int step = 3; step < 10; ++step) CHECK(global_step(two, 4) == global_step(uninterrupted, 2));
}

TEST_CASE("shuffle off keeps the samples in order") {
  DistributedSampler s(10, 2, 1, 1, 2, DistributedSampler::Options{0, false});
  CHECK(s.next() == std::vector<int64_t>{2, 3});  // rank 1 of 2: the second micro-batch of 4
  CHECK(s.next() == std::vector<int64_t>{6, 7});
  CHECK(s.next() == std::vector<int64_t>{2, 3});  // 10 / 4 = 2 steps per epoch, then epoch 1
  CHECK(s.epoch() == 1);
}

TEST_CASE("refused: a state of another dataset, a mid-step save, a dataset below one batch") {
  auto four = samplers(100, 3, 2, 4);
  nlohmann::json state = four[0]->state();
  DistributedSampler other_seed(100, 3, 2, 0, 4, DistributedSampler::Options{8, true});
  CHECK_THROWS_AS(other_seed.load_state(state), zero::CheckpointError);
  DistributedSampler other_size(99, 3, 2, 0, 4, DistributedSampler::Options{7, true});
  CHECK_THROWS_WITH(other_size.load_state(state), Catch::Contains("the dataset or its order"));
  four[0]->next();
  CHECK_THROWS_WITH(four[0]->state(), Catch::Contains("1 of the 2 micro-batches"));
  CHECK_THROWS_AS(DistributedSampler(20, 3, 2, 0, 4, DistributedSampler::Options{}),
                  zero::UsageError);
  state["position"] = 1000;
  CHECK_THROWS_AS(other_size.load_state(state), zero::CheckpointError);
}
