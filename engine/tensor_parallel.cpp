// Tensor parallelism in the engine: which parameters the model's zero::tp layers split, the
// checks that the model and the grid agree, and what is not built for it yet.
#include "engine_impl.h"

#include <zero/engine/pipe/module.h>
#include <zero/tp/layers.h>

namespace zero::detail {

SplitDims check_tensor_parallel(const torch::nn::Module& model, const ParallelGrid* grid) {
  SplitDims split;
  if (grid) {
    ZERO_CHECK(grid->pipeline_size() == 1 ||
                   dynamic_cast<const pipe::PipelineModuleImpl*>(&model) != nullptr,
               UsageError, "initialize: the grid (", grid->to_string(),
               ") has pipeline stages; the model must be a zero::pipe::PipelineModule built on it");
  }
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const auto* layer = dynamic_cast<const tp::TensorParallelModule*>(item.value().get());
    if (!layer) continue;
    const std::string name = item.key().empty() ? "the model" : "'" + item.key() + "'";
    const int degree = layer->tensor_group() ? layer->tensor_group()->world_size() : 1;
    ZERO_CHECK(grid || degree == 1, UsageError, "initialize: ", name,
               " is a tensor-parallel layer over ", degree,
               " ranks; pass the ParallelGrid it was built on: zero::initialize(model, config, "
               "grid), so that ZeRO shards over the data-parallel group only");
    ZERO_CHECK(!grid || layer->tensor_group() == grid->tensor_group(), UsageError,
               "initialize: ", name,
               " was built on another communicator than the grid's tensor group (",
               grid ? grid->to_string() : "",
               "); build the zero::tp layers on "
               "grid.tensor_group()");
    for (const tp::SplitParameter& s : layer->split_parameters())
      if (s.tensor.defined())
        split.emplace(s.tensor.unsafeGetTensorImpl(), SplitLayout{s.dim, s.stride});
  }
  return split;
}

at::Tensor whole_of_slices(Communicator& tensor_group, const at::Tensor& slice,
                           SplitLayout layout) {
  const int64_t parts = tensor_group.world_size(), dim = layout.dim;
  const at::Tensor local = slice.detach().contiguous();
  std::vector<int64_t> stacked_sizes{parts};
  stacked_sizes.insert(stacked_sizes.end(), local.sizes().begin(), local.sizes().end());
  at::Tensor stacked = at::empty(stacked_sizes, local.options());
  tensor_group.all_gather(local, stacked)->wait();
  // [T, .., stride x c, ..] as [T, .., stride, c, ..] -> [.., stride, T, c, ..]: the whole's
  // parts in order (part s x T + r is rank r's s-th block).
  std::vector<int64_t> blocks(stacked_sizes);
  blocks[dim + 1] = layout.stride;
  blocks.insert(blocks.begin() + dim + 2, local.size(dim) / layout.stride);
  std::vector<int64_t> whole_sizes(local.sizes().begin(), local.sizes().end());
  whole_sizes[dim] *= parts;
  return stacked.view(blocks).movedim(0, dim + 1).reshape(whole_sizes);
}

}  // namespace zero::detail

namespace zero {

ParallelGrid parallel_grid(const Config& config, std::shared_ptr<Communicator> world) {
  if (!world) world = world_communicator();
  ZERO_CHECK(config.world_size == world->world_size(), ConfigError,
             "parallel_grid: the config was resolved for world_size ", config.world_size,
             " but the world has ", world->world_size(), " ranks");
  GridSizes sizes;
  sizes.tensor = config.tensor_parallel_size;
  sizes.pipeline = config.pipeline_parallel_size;
  return parallel_grid(std::move(world), sizes);
}

ParallelGrid parallel_grid(const std::string& config_path, Backend backend) {
  std::shared_ptr<Communicator> world = world_communicator(backend);
  ConfigOptions options;
  options.world_size = world->world_size();
  return parallel_grid(parse_config_file(config_path, options).config, std::move(world));
}

}  // namespace zero
