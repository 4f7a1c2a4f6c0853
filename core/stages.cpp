// Stages 0-2 on top of FlatStage, and Stage::create. Stage 0: full optimizer on replicated
// buffers; 1: sharded optimizer state; 2: + gradient shards (reduce-scatter during backward).
#include "flat_stage.h"
#include "stage3.h"

#include <zero/error.h>

namespace zero {
namespace detail {
namespace {

// Stage 0: all-reduced full gradients, the optimizer updates the full flat buffer on every rank.
class Stage0 : public FlatStage {
 public:
  Stage0(const StageOptions& o, std::vector<at::Tensor> p, FlatLayout l,
         std::shared_ptr<Communicator> c)
      : FlatStage(o, std::move(p), std::move(l), std::move(c), GradReduction::kAllReduce) {
    setup(std::vector<bool>(layout_.groups().size(), false));
  }
  int stage() const override { return 0; }
  std::vector<OptimizerShard> optimizer_shards() override {
    std::vector<OptimizerShard> out;
    for (size_t g = 0; g < groups_.size(); ++g) out.push_back(shard_of(g, groups_[g].flat_grad));
    return out;
  }
  bool shards_replicated() const override { return true; }
  // The optimizer updated the flat buffer itself (fp32: the master is it; 16-bit: param16).
  void publish_parameters() override {}
};

// Stage 1: all-reduced full gradients; master and optimizer state for this rank's shard only;
// the updated shards are all-gathered into the full parameters.
class Stage1 : public FlatStage {
 public:
  Stage1(const StageOptions& o, std::vector<at::Tensor> p, FlatLayout l,
         std::shared_ptr<Communicator> c)
      : FlatStage(o, std::move(p), std::move(l), std::move(c), GradReduction::kAllReduce) {
    setup(std::vector<bool>(layout_.groups().size(), false));
  }
  int stage() const override { return 1; }
  std::vector<OptimizerShard> optimizer_shards() override {
    std::vector<OptimizerShard> out;
    for (size_t g = 0; g < groups_.size(); ++g) {
      const BufferRange r = layout_.groups()[g].shard(rank_);
      out.push_back(shard_of(g, groups_[g].flat_grad.narrow(0, r.begin, r.numel())));
    }
    return out;
  }
  bool shards_replicated() const override { return false; }
  void publish_parameters() override { publish_groups(/*sharded_too=*/true); }
};

// Stage 2: gradients reduce-scattered bucket by bucket into this rank's gradient shard.
class Stage2 : public FlatStage {
 public:
  Stage2(const StageOptions& o, std::vector<at::Tensor> p, FlatLayout l,
         std::shared_ptr<Communicator> c)
      : FlatStage(o, std::move(p), std::move(l), std::move(c), GradReduction::kReduceScatter) {
    setup(std::vector<bool>(layout_.groups().size(), false));
  }
  int stage() const override { return 2; }
  std::vector<OptimizerShard> optimizer_shards() override {
    std::vector<OptimizerShard> out;
    for (size_t g = 0; g < groups_.size(); ++g) out.push_back(shard_of(g, groups_[g].grad_shard));
    return out;
  }
  bool shards_replicated() const override { return false; }
  void publish_parameters() override { publish_groups(/*sharded_too=*/true); }
};

}  // namespace
}  // namespace detail

std::unique_ptr<Stage> Stage::create(const StageOptions& options, std::vector<at::Tensor> params,
                                     FlatLayout layout, std::shared_ptr<Communicator> comm,
                                     std::vector<UnitSpec> units,
                                     std::vector<at::Tensor> param_shards) {
  switch (options.stage) {
    case 0:
      return std::make_unique<detail::Stage0>(options, std::move(params), std::move(layout),
                                              std::move(comm));
    case 1:
      return std::make_unique<detail::Stage1>(options, std::move(params), std::move(layout),
                                              std::move(comm));
    case 2:
      return std::make_unique<detail::Stage2>(options, std::move(params), std::move(layout),
                                              std::move(comm));
    case 3:
      return std::make_unique<detail::Stage3>(options, std::move(params), std::move(layout),
                                              std::move(comm), std::move(units),
                                              std::move(param_shards));
    default:
      throw ConfigError(detail::str("zero_optimization.stage: ", options.stage,
                                    " is not a ZeRO stage; use 0, 1, 2 or 3"));
  }
}

}  // namespace zero
