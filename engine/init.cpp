// zero::Init: partitions each zero::Sharded block as it is constructed, with the layout the
// engine will build for it: the block's parameters in reverse registration order, grouped by
// (persistent, dtype), aligned and padded exactly as FlatLayout does for the block's unit, so
// that the shard kept here is the one the stage would have cut from the whole model.
#include <zero/comm/process_group.h>
#include <zero/core/layout.h>
#include <zero/core/stage.h>
#include <zero/core/storage.h>
#include <zero/engine/init.h>
#include <zero/engine/host_pool.h>
#include <zero/core/float_type_torch.h>
#include <zero/error.h>
#include <zero/tp/layers.h>

#include "world_setup.h"

#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <unordered_set>

namespace zero {

namespace {
thread_local const Init* g_active = nullptr;
}

Init::Init(const std::string& config_path) {
  ConfigOptions options;
  options.world_size = detect_rank_env().world_size;
  setup(parse_config_file(config_path, options).config, nullptr);
}

Init::Init(const ParsedConfig& config) {
  setup(config.config, nullptr);
}

Init::Init(const ParsedConfig& config, const ParallelGrid& grid) {
  setup(config.config, &grid);
}

void Init::setup(const Config& c, const ParallelGrid* grid) {
  ZERO_CHECK(g_active == nullptr, UsageError,
             "zero::Init: another zero::Init is alive on this thread; one scope at a time");
  ZERO_CHECK(c.zero_optimization.stage == 3, ConfigError,
             "zero::Init partitions blocks for ZeRO stage 3, but zero_optimization.stage is ",
             c.zero_optimization.stage, "; build the model without zero::Init");
  const RankEnv env = detect_rank_env();
  ZERO_CHECK(env.world_size == c.world_size, ConfigError,
             "zero::Init: the config was resolved for ", c.world_size, " ranks but the job has ",
             env.world_size);
  ZERO_CHECK(grid || c.tensor_parallel_size == 1, UsageError,
             "zero::Init: tensor_parallel.autotp_size is ", c.tensor_parallel_size,
             "; pass the grid the engine will get: zero::Init(config, grid)");
  ZERO_CHECK(!grid || grid->tensor_size() == c.tensor_parallel_size, ConfigError,
             "zero::Init: the config's tensor_parallel.autotp_size is ", c.tensor_parallel_size,
             " but the grid has ", grid ? grid->to_string() : "");
  // ZeRO shards over the data-parallel ranks only (MiCS: over this rank's shard group of them).
  const int data_world = grid ? grid->data_size() : env.world_size;
  world_ = detail::shard_world(c, data_world);
  rank_ = (grid ? grid->data_rank() : env.rank) % world_;
  dtype_ = c.fp16.enabled ? at::kHalf : c.bf16.enabled ? at::kBFloat16 : at::kFloat;
  persistence_threshold_numel_ = c.zero_optimization.stage3_param_persistence_threshold;
  layout_options_ = detail::layout_options(c, data_world);
  // Before the first block is built, so that its shards and transients come from the pool too.
  use_host_pool();
  g_active = this;
}

Init::~Init() {
  if (g_active == this) g_active = nullptr;
}

const Init* Init::active() {
  return g_active;
}

std::vector<at::Tensor> Init::partition(torch::nn::Module& block) const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> params;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (at::Tensor& p : block.parameters(/*recurse=*/true))
    if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) params.push_back(p);
  // As the engine converts the whole model (DeepSpeed's module.half() / .bfloat16()).
  if (dtype_ != at::kFloat) {
    for (at::Tensor& p : params)
      if (p.scalar_type() == at::kFloat) p.set_data(p.to(dtype_));
    for (at::Tensor& b : block.buffers(/*recurse=*/true))
      if (b.scalar_type() == at::kFloat) b.set_data(b.to(dtype_));
  }
  // The engine keeps tensor-parallel slices in groups of their own (ParamSpec::tensor_split).
  std::unordered_set<const c10::TensorImpl*> split;
  for (const auto& m : block.modules(/*include_self=*/true))
    if (const auto* layer = dynamic_cast<const tp::TensorParallelModule*>(m.get()))
      for (const tp::SplitParameter& s : layer->split_parameters())
        if (s.tensor.defined()) split.insert(s.tensor.unsafeGetTensorImpl());
  std::vector<ParamSpec> specs;
  std::vector<at::Tensor> ordered;  // layout order: reverse registration order
  for (auto it = params.rbegin(); it != params.rend(); ++it) {
    ParamSpec spec;
    spec.numel = it->numel();
    spec.dtype = float_type_of(it->scalar_type(), "a parameter built under zero::Init");
    spec.unit = 1;
    spec.persistent = spec.numel <= persistence_threshold_numel_;
    spec.tensor_split = split.count(it->unsafeGetTensorImpl()) > 0;
    specs.push_back(spec);
    ordered.push_back(*it);
  }
  std::vector<at::Tensor> shards;
  if (specs.empty()) return shards;
  const FlatLayout layout = FlatLayout::build(specs, layout_options_);
  for (const Group& g : layout.groups()) {
    if (g.persistent) continue;  // small parameters stay whole, as the stage keeps them
    // Only this rank's part of each parameter is copied: no whole flat buffer is made.
    const BufferRange mine = g.shard(rank_);
    at::Tensor shard =
        at::zeros({mine.numel()}, at::TensorOptions().dtype(to_scalar_type(g.dtype)));
    for (int pi : g.params) {
      const BufferRange r = layout.slots()[pi].buffer;
      const BufferRange part = r.intersect(mine);
      if (part.empty()) continue;
      shard.narrow(0, part.begin - mine.begin, part.numel())
          .copy_(ordered[pi].reshape({-1}).narrow(0, part.begin - r.begin, part.numel()));
    }
    shards.push_back(shard);
    for (int pi : g.params) detail::free_storage(ordered[pi]);
  }
  return shards;
}

}  // namespace zero
