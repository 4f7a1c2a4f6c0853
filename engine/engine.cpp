// Engine and zero::initialize: collects the model's trainable parameters and wrapped blocks,
// checks that all ranks agree, builds the layout, stage, optimizer and LR schedule, and runs
// backward / step with DeepSpeed's accumulation, clipping and scheduling semantics.
#include "engine_impl.h"
#include "optimizer_setup.h"
#include "world_setup.h"

#include <zero/comm/process_group.h>
#include <zero/core/float_type_torch.h>
#include <zero/core/loss_scaler.h>
#include <zero/core/optimizer.h>
#include <zero/core/stage.h>
#include <zero/engine/engine.h>
#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/host_pool.h>
#include <zero/engine/pipe/module.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/sharded.h>
#include <zero/kernels/math.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace zero {

namespace {

// Every wrapped block of the model, checked: none nested, none registered twice.
std::vector<ShardedImpl*> find_wrappers(torch::nn::Module& model) {
  std::vector<ShardedImpl*> found;
  std::unordered_set<ShardedImpl*> seen;
  for (const auto& item : model.named_modules("", /*include_self=*/true)) {
    auto* w = dynamic_cast<ShardedImpl*>(item.value().get());
    if (!w) continue;
    ZERO_CHECK(seen.insert(w).second, UsageError, "zero::Sharded block '", item.key(),
               "' appears twice in the model; wrap each block once");
    for (const auto& inner : w->inner()->modules(/*include_self=*/true))
      ZERO_CHECK(!dynamic_cast<ShardedImpl*>(inner.get()), UsageError, "zero::Sharded block '",
                 item.key(), "' contains another zero::Sharded block; a block is wrapped twice");
    found.push_back(w);
  }
  return found;
}

void check_config(const Config& c) {
  ZERO_CHECK(!(c.fp16.enabled && c.bf16.enabled), ConfigError,
             "fp16.enabled and bf16.enabled are both true; choose one precision");
  ZERO_CHECK(!c.fp16.enabled || !c.fp16.auto_cast, ConfigError,
             "fp16.auto_cast: not supported; cast the model's inputs yourself (the engine "
             "converts the parameters to fp16)");
  detail::check_offload_config(c);
  ZERO_CHECK(!c.optimizer.type.empty(), ConfigError,
             "optimizer.type: the ds_config must name an optimizer (Adam, AdamW or SGD)");
  ZERO_CHECK(!c.optimizer.amsgrad, ConfigError, "optimizer.params.amsgrad: not supported");
  ZERO_CHECK(c.gradient_accumulation_steps >= 1, ConfigError,
             "gradient_accumulation_steps must be >= 1, got ", c.gradient_accumulation_steps);
}

// "fp32" / "fp16" / "bf16" (validated by the config parser); "" -> Undefined (the default).
at::ScalarType dtype_of(const std::string& name) {
  if (name == "fp32") return at::kFloat;
  if (name == "fp16") return at::kHalf;
  if (name == "bf16") return at::kBFloat16;
  return at::ScalarType::Undefined;
}

at::ScalarType compute_dtype_of(const Config& c) {
  if (c.fp16.enabled) return at::kHalf;
  if (c.bf16.enabled) return at::kBFloat16;
  return at::kFloat;
}

// fp16/bf16 training: the model's fp32 parameters and floating buffers become 16-bit, as
// DeepSpeed's module.half() / module.bfloat16() (the fp32 masters are made from these).
void convert_model(torch::nn::Module& model, at::ScalarType dtype) {
  at::NoGradGuard no_grad;
  for (at::Tensor& p : model.parameters(/*recurse=*/true)) {
    if (p.scalar_type() != at::kFloat) continue;
    p.set_data(p.to(dtype));
    if (p.grad().defined()) p.mutable_grad().reset();
  }
  for (at::Tensor& b : model.buffers(/*recurse=*/true))
    if (b.scalar_type() == at::kFloat) b.set_data(b.to(dtype));
}

std::optional<LossScaler> make_loss_scaler(const Fp16Config& f) {
  if (!f.enabled) return std::nullopt;
  LossScalerOptions o;
  o.dynamic = f.loss_scale == 0;
  o.static_scale = f.loss_scale == 0 ? 1.0 : f.loss_scale;
  o.initial_scale = std::ldexp(1.0, f.initial_scale_power);
  o.scale_window = f.loss_scale_window;
  o.hysteresis = f.hysteresis;
  o.consecutive_hysteresis = f.consecutive_hysteresis;
  o.min_scale = f.min_loss_scale;
  return LossScaler(o);
}

StageOptions stage_options(const Config& c) {
  const ZeroOptimizationConfig& z = c.zero_optimization;
  StageOptions s;
  s.grad_dtype = dtype_of(c.data_types.grad_accum_dtype);
  // DeepSpeed's default: bf16 without ZeRO (stage 0) accumulates gradients in fp32.
  if (c.data_types.grad_accum_dtype.empty() && c.bf16.enabled && z.stage == 0)
    s.grad_dtype = at::kFloat;
  s.comm_dtype = dtype_of(c.communication_data_type);
  s.prescale_gradients = c.prescale_gradients;
  s.predivide_factor = c.gradient_predivide_factor;
  s.stage = z.stage;
  s.reduce_bucket_numel = z.reduce_bucket_size;
  s.allgather_bucket_numel = z.allgather_bucket_size;
  s.overlap_comm = z.overlap_comm;
  s.prefetch_numel = z.stage3_prefetch_bucket_size;
  s.persistence_threshold_numel = z.stage3_param_persistence_threshold;
  s.max_live_numel = z.stage3_max_live_parameters;
  s.max_reuse_distance_numel = z.stage3_max_reuse_distance;
  s.offload_optimizer = z.offload_optimizer.device != "none" && z.stage >= 1;
  s.quantized_weights = z.stage == 3 && z.zero_quantized_weights;
  s.host_shared_params = z.host_shared_params;
  return s;
}

// Units built under zero::Init (zero::Sharded blocks, a pipeline's layers) bring this rank's
// shard of each of their sharded layout groups. `unit_shards`: per unit, what zero::Init made of
// it (empty: built whole). Returns per layout group the shard (undefined for units built whole).
std::vector<at::Tensor> take_init_shards(std::vector<std::vector<at::Tensor>> unit_shards,
                                         const std::vector<UnitSpec>& units,
                                         const FlatLayout& layout, int stage) {
  std::vector<at::Tensor> out(layout.groups().size());
  for (size_t u = 1; u < unit_shards.size(); ++u) {
    std::vector<at::Tensor>& shards = unit_shards[u];
    if (shards.empty()) continue;
    const std::string& name = units[u].name;
    ZERO_CHECK(stage == 3, UsageError, "initialize: ", name,
               " was built under zero::Init (partitioned for ZeRO stage 3) but the config "
               "selects stage ",
               stage, "; build the model without zero::Init, or train at stage 3");
    size_t next = 0;
    for (size_t gi = 0; gi < layout.groups().size(); ++gi) {
      const Group& g = layout.groups()[gi];
      if (g.unit != static_cast<int>(u) || g.persistent) continue;
      ZERO_CHECK(next < shards.size() && shards[next].numel() == g.shard_numel &&
                     shards[next].scalar_type() == to_scalar_type(g.dtype),
                 UsageError, "initialize: ", name,
                 " was partitioned by zero::Init for another layout (a different world size, "
                 "precision or stage3_param_persistence_threshold); give zero::Init the "
                 "config that zero::initialize gets");
      out[gi] = std::move(shards[next++]);
    }
    ZERO_CHECK(next == shards.size(), UsageError, "initialize: ", name,
               " was partitioned by zero::Init into ", shards.size(), " groups, the engine has ",
               next, "; give zero::Init the config that zero::initialize gets");
  }
  return out;
}

}  // namespace

std::shared_ptr<Communicator> world_communicator(Backend backend) {
  static std::mutex mutex;
  static std::map<Backend, std::shared_ptr<Communicator>> worlds;
  std::lock_guard<std::mutex> lock(mutex);
  auto& world = worlds[backend];
  if (world) return world;
  const RankEnv env = detect_rank_env();
  // Each backend rendezvouses on MASTER_PORT: two in one multi-process job would collide.
  for (const auto& [other, comm] : worlds)
    ZERO_CHECK(!comm || other == backend || env.world_size == 1, UsageError,
               "world_communicator: this process already has a ", to_string(other),
               " world; a job uses one backend (", to_string(backend),
               " was asked for). Keep the "
               "model on one kind of device, or pass a communicator to zero::initialize");
  CommOptions options;
  options.backend = backend;
  world = init_communicator(env, options);
  return world;
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const std::string& config_path,
                  const std::map<std::string, std::string>& overrides) {
  ZERO_CHECK(model, UsageError, "initialize: no model");
  auto comm = detail::communicator_for(*model);
  ConfigOptions options;
  options.world_size = comm->world_size();
  options.overrides = overrides;
  return initialize(std::move(model), parse_config_file(config_path, options), comm);
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& config) {
  ZERO_CHECK(model, UsageError, "initialize: no model");
  auto comm = detail::communicator_for(*model);
  return initialize(std::move(model), config, std::move(comm));
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& parsed,
                  std::shared_ptr<Communicator> comm) {
  return detail::initialize_on(std::move(model), parsed, std::move(comm), nullptr);
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& parsed,
                  const ParallelGrid& grid) {
  ZERO_CHECK(grid.world(), UsageError, "initialize: the grid has no world (use parallel_grid)");
  return detail::initialize_on(std::move(model), parsed, grid.world(), &grid);
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const std::string& config_path,
                  const ParallelGrid& grid, const std::map<std::string, std::string>& overrides) {
  ZERO_CHECK(grid.world(), UsageError, "initialize: the grid has no world (use parallel_grid)");
  ConfigOptions options;
  options.world_size = grid.world()->world_size();
  options.overrides = overrides;
  return initialize(std::move(model), parse_config_file(config_path, options), grid);
}

Engine detail::initialize_on(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& parsed,
                             std::shared_ptr<Communicator> comm, const ParallelGrid* grid) {
  ZERO_CHECK(model, UsageError, "initialize: no model");
  ZERO_CHECK(comm, UsageError, "initialize: no communicator");
  use_host_pool();
  auto impl = std::make_unique<Engine::Impl>();
  impl->model = model;
  impl->config = parsed.config;
  impl->comm = comm;
  // Checked on every rank alike, before any collective.
  impl->split_dims = detail::check_tensor_parallel(*model, grid);
  const detail::SplitDims& split = impl->split_dims;
  impl->data = grid ? grid->data_group() : comm;
  const ZeroOptimizationConfig& zc = parsed.config.zero_optimization;
  // Checked on every rank alike, before the groups are made.
  ZERO_CHECK(zc.stage != 3 || zc.mics_shard_size <= 0 ||
                 (!grid || (grid->tensor_size() == 1 && grid->pipeline_size() == 1)),
             UsageError, "initialize: MiCS (zero_optimization.mics_shard_size ", zc.mics_shard_size,
             ") with ", grid ? grid->to_string() : std::string(),
             ": MiCS shards plain data parallelism only so far; drop mics_shard_size, or the "
             "tensor and pipeline parallelism");
  const detail::MicsGroups mics = detail::mics_groups(parsed.config, impl->data);
  impl->replicas = mics.replicas;
  impl->reducing = detail::reducing_communicator(
      mics.shard, comm->rank() == 0, zc.stage == 3 && zc.zero_quantized_gradients,
      zc.stage == 3 && zc.mics_shard_size > 0 && zc.mics_hierarchical_params_gather);
  impl->tensor = grid ? grid->tensor_group() : nullptr;
  impl->tensor_rank = grid ? grid->tensor_rank() : 0;
  impl->tensor_size = grid ? grid->tensor_size() : 1;
  const Config& config = impl->config;
  const int rank = comm->rank();
  const int data_size = impl->data->world_size();
  ZERO_CHECK(config.world_size == comm->world_size(), ConfigError,
             "the config's batch sizes were resolved for world_size ", config.world_size,
             " but the job has ", comm->world_size(),
             " ranks; parse it with ConfigOptions::world_size = ", comm->world_size());
  ZERO_CHECK(config.pipeline_parallel_size == (grid ? grid->pipeline_size() : 1), UsageError,
             "initialize: pipeline.stages is ", config.pipeline_parallel_size,
             grid ? " but the grid has " + grid->to_string()
                  : std::string("; build the grid (zero::parallel_grid(config, world)), the "
                                "zero::pipe::PipelineModule on it, and pass it"));
  if (grid && grid->pipeline_size() > 1) {
    impl->pipeline = dynamic_cast<pipe::PipelineModuleImpl*>(model.get());
    impl->pipe_group = grid->pipeline_group();
    impl->pipeline_size = grid->pipeline_size();
    if (rank == 0 && config.gradient_accumulation_steps < grid->pipeline_size())
      spdlog::warn(
          "[rank 0] pipeline: {} micro-batches (gradient_accumulation_steps) for {} stages: each "
          "stage idles (p - 1) / (m + p - 1) = {:.0f}% of a batch",
          config.gradient_accumulation_steps, grid->pipeline_size(),
          100.0 * (grid->pipeline_size() - 1) /
              static_cast<double>(config.gradient_accumulation_steps + grid->pipeline_size() - 1));
    const pipe::ScheduleKind kind = pipe::parse_schedule_kind(config.pipeline_schedule);
    const int chunks =
        kind == pipe::ScheduleKind::kInterleaved ? config.pipeline_virtual_stages : 1;
    if (impl->pipeline && kind == pipe::ScheduleKind::kZeroBubbleH1) {
      bool checkpointed = impl->pipeline->options().activation_checkpoint_interval() > 0;
      for (const auto& m : model->modules(/*include_self=*/false))
        checkpointed = checkpointed || dynamic_cast<CheckpointedImpl*>(m.get()) != nullptr;
      ZERO_CHECK(!checkpointed, UsageError,
                 "initialize: the zb-h1 schedule with activation checkpointing (a "
                 "zero::Checkpointed layer or PipelineOptions::activation_checkpoint_interval): "
                 "its input-gradient pass cannot drive a recompute; use 1f1b or interleaved");
    }
    if (impl->pipeline)
      ZERO_CHECK(impl->pipeline->virtual_stages() == chunks, UsageError,
                 "initialize: the PipelineModule has ", impl->pipeline->virtual_stages(),
                 " virtual stages (PipelineOptions::virtual_stages) but the config's schedule ",
                 config.pipeline_schedule, " runs ", chunks,
                 " model chunks per stage (pipeline.virtual_stages); make them agree");
    impl->pipe_program = pipe::build_schedule(kind, grid->pipeline_size(),
                                              static_cast<int>(config.gradient_accumulation_steps),
                                              grid->pipeline_rank(), chunks);
    impl->pipe_eval_program = pipe::forward_only(impl->pipe_program);
  }
  ZERO_CHECK(grid || config.tensor_parallel_size == 1, UsageError,
             "initialize: tensor_parallel.autotp_size is ", config.tensor_parallel_size,
             "; build the grid (zero::parallel_grid(config, world)), the model's zero::tp layers "
             "on its tensor group, and pass it: zero::initialize(model, config, grid)");
  ZERO_CHECK(!grid || config.tensor_parallel_size == grid->tensor_size(), ConfigError,
             "the config's tensor_parallel.autotp_size is ", config.tensor_parallel_size,
             " but the grid has ", grid ? grid->to_string() : "",
             "; set autotp_size to the grid's tensor-parallel size");
  ZERO_ASSERT(config.data_parallel_size == data_size, "data-parallel size ",
              config.data_parallel_size, " vs the group's ", data_size);
  check_config(config);
  impl->observe_before_stage();
  CommsLog::CallerScope caller("initialize");
  if (rank == 0)
    for (const auto& w : parsed.warnings) spdlog::warn("[rank 0] config: {}", w.to_string());
  const int stage = config.zero_optimization.stage;
  impl->compute_dtype = compute_dtype_of(config);
  impl->scaler = make_loss_scaler(config.fp16);
  impl->check_overflow =
      config.fp16.enabled || (config.bf16.enabled && config.bf16.check_grad_overflow);
  if (impl->compute_dtype != at::kFloat) convert_model(*model, impl->compute_dtype);

  // Trainable parameters, each once (tied weights share a TensorImpl), in registration order.
  std::vector<std::pair<std::string, at::Tensor>> ordered;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : model->named_parameters(/*recurse=*/true)) {
    const at::Tensor& p = item.value();
    if (!p.requires_grad() || !seen.insert(p.unsafeGetTensorImpl()).second) continue;
    ordered.emplace_back(item.key(), p);
  }
  ZERO_CHECK(!ordered.empty(), UsageError, "initialize: the model has no trainable parameters");
  for (const auto& [name, p] : ordered) {
    ZERO_CHECK(p.device() == ordered[0].second.device(), UsageError,
               "initialize: parameters on "
               "different devices: '",
               ordered[0].first, "' on ", ordered[0].second.device(), " and '", name, "' on ",
               p.device(), "; move the whole model to one device first");
    ZERO_CHECK(p.scalar_type() == impl->compute_dtype, UsageError, "initialize: parameter '", name,
               "' is ", p.scalar_type(), " but the config trains in ", impl->compute_dtype,
               " (fp16/bf16.enabled); give the engine float32 or ", impl->compute_dtype,
               " parameters");
  }

  // Units: wrapped blocks are units 1..K, the rest of the model unit 0. A pipeline's layers are
  // its units instead: the executor gathers them all for a batch (Stage::hold_gathered), so
  // they need no forward hooks.
  impl->wrappers = find_wrappers(*model);
  std::unordered_map<const c10::TensorImpl*, int> unit_of;
  std::vector<UnitSpec> units{{"(rest of the model)"}};
  if (impl->pipeline && stage == 3) {
    ZERO_CHECK(impl->wrappers.empty(), UsageError,
               "initialize: a PipelineModule's layers are ZeRO stage 3 units already; build them "
               "without zero::Sharded (",
               impl->wrappers.size(), " found)");
    for (const auto& [index, layer] : impl->pipeline->owned_layers()) {
      units.push_back({detail::str("layer ", index)});
      for (const auto& p : layer.ptr()->parameters(/*recurse=*/true))
        unit_of.emplace(p.unsafeGetTensorImpl(), static_cast<int>(units.size() - 1));
    }
  }
  for (size_t k = 0; k < impl->wrappers.size(); ++k) {
    units.push_back({detail::str("block ", k)});
    for (const auto& p : impl->wrappers[k]->parameters(/*recurse=*/true)) {
      auto [it, inserted] = unit_of.emplace(p.unsafeGetTensorImpl(), static_cast<int>(k + 1));
      ZERO_CHECK(inserted || it->second == static_cast<int>(k + 1), UsageError,
                 "initialize: a parameter belongs to two zero::Sharded blocks (", it->second - 1,
                 " and ", k, "); a block is wrapped twice");
    }
  }
  if (stage == 3)
    ZERO_CHECK(!impl->wrappers.empty() || impl->pipeline, UsageError,
               "ZeRO stage 3 needs the model's blocks "
               "wrapped in zero::Sharded (LibTorch modules have no forward hooks); the model has "
               "none. Wrap each transformer block: blocks[i] = zero::Sharded(block)");

  // Layout order: reverse registration order, which is roughly gradient arrival order.
  // Tied layers held by several pipeline stages: one group per tie key and (data, tensor) rank,
  // made by every rank in the same order; copies on all but the tie's first stage are marked.
  std::unordered_set<const c10::TensorImpl*> tied_copies;
  std::vector<std::vector<const c10::TensorImpl*>> tied_params;  // per this rank's ties
  if (impl->pipeline) {
    const GridLayout& grid_layout = grid->layout();
    for (const pipe::PipelineModuleImpl::Tie& tie : impl->pipeline->ties()) {
      for (int d = 0; d < grid_layout.data_size(); ++d)
        for (int t = 0; t < grid_layout.tensor_size(); ++t) {
          std::vector<int> ranks;
          for (int st : tie.stages) ranks.push_back(grid_layout.rank_of({t, d, st}));
          std::shared_ptr<Communicator> group = comm->new_group(ranks);
          if (group) impl->ties.push_back({group, {}});
        }
      if (tie.module.is_empty()) continue;
      tied_params.emplace_back();
      for (const auto& p : tie.module.ptr()->parameters(/*recurse=*/true)) {
        tied_params.back().push_back(p.unsafeGetTensorImpl());
        if (grid->pipeline_rank() != tie.stages[0]) tied_copies.insert(p.unsafeGetTensorImpl());
      }
    }
    ZERO_ASSERT(impl->ties.size() == tied_params.size(), impl->ties.size(), " tie groups for ",
                tied_params.size(), " tied modules");
  }

  StageOptions sopts = stage_options(config);
  sopts.defer_reduction = impl->pipeline != nullptr;
  sopts.replica_group = impl->replicas;
  std::vector<ParamSpec> specs;
  for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
    ParamSpec spec;
    spec.name = it->first;
    spec.numel = it->second.numel();
    spec.dtype = float_type_of(it->second.scalar_type(), spec.name);
    spec.tensor_split = split.count(it->second.unsafeGetTensorImpl()) > 0;
    spec.tied_copy = tied_copies.count(it->second.unsafeGetTensorImpl()) > 0;
    if (stage == 3) {
      auto u = unit_of.find(it->second.unsafeGetTensorImpl());
      spec.unit = u == unit_of.end() ? 0 : u->second;
      spec.persistent = spec.numel <= sopts.persistence_threshold_numel;
    }
    specs.push_back(spec);
    impl->params.push_back(it->second);
    impl->names.push_back(it->first);
  }
  for (size_t k = 0; k < impl->ties.size(); ++k)
    for (const c10::TensorImpl* p : tied_params[k])
      for (size_t i = 0; i < impl->params.size(); ++i)
        if (impl->params[i].unsafeGetTensorImpl() == p)
          impl->ties[k].params.push_back(static_cast<int>(i));
  // ZeRO shards over the data-parallel ranks only.
  FlatLayout layout = FlatLayout::build(specs, detail::layout_options(config, data_size));
  // Pipeline stages hold different layers: the ranks of one stage (its data group) must agree.
  detail::check_same_layout(impl->pipeline ? *impl->data : *comm, layout,
                            ordered[0].second.device(), "initialize");

  // What zero::Init made of each unit: a pipeline's layers (units 1.. at stage 3), then the
  // zero::Sharded blocks.
  std::vector<std::vector<at::Tensor>> unit_shards(units.size());
  if (impl->pipeline) {
    std::vector<std::vector<at::Tensor>> layers = impl->pipeline->take_init_shards();
    const bool any = std::any_of(layers.begin(), layers.end(),
                                 [](const auto& shards) { return !shards.empty(); });
    ZERO_CHECK(!any || stage == 3, UsageError,
               "initialize: the PipelineModule was built under zero::Init (its layers "
               "partitioned for ZeRO stage 3) but the config selects stage ",
               stage, "; build it without zero::Init, or train at stage 3");
    if (stage == 3)
      for (size_t i = 0; i < layers.size(); ++i) unit_shards[i + 1] = std::move(layers[i]);
  }
  for (size_t k = 0; k < impl->wrappers.size(); ++k)
    if (impl->wrappers[k]->partitioned()) unit_shards[k + 1] = impl->wrappers[k]->take_shards();
  std::vector<at::Tensor> param_shards =
      take_init_shards(std::move(unit_shards), units, layout, stage);
  const detail::SwapFolders swap_folders =
      detail::open_swap_folders(config, *comm, ordered[0].second.device());
  sopts.param_store = detail::make_param_store(config, swap_folders, comm->rank());
  impl->zeropp =
      detail::setup_zeropp(config, *impl->data, *impl->reducing, impl->pipeline != nullptr, sopts);
  // A pipeline's stage keeps its parameters gathered for the batch: no gathers in backward.
  if (stage == 3 && !impl->pipeline && impl->reducing->world_size() > 1)
    sopts.gather_group = detail::gathering_communicator(
        mics.shard, zc.mics_shard_size > 0 && zc.mics_hierarchical_params_gather);
  impl->stage =
      Stage::create(sopts, impl->params, std::move(layout), impl->reducing,
                    stage == 3 ? units : std::vector<UnitSpec>{}, std::move(param_shards));
  for (size_t k = 0; k < impl->wrappers.size(); ++k)
    impl->wrappers[k]->attach(stage == 3 ? impl->stage.get() : nullptr, static_cast<int>(k + 1));
  impl->activations =
      detail::attach_checkpoints(*model, config, rank, ordered[0].second.device(), impl->tensor);
  if (impl->pipeline) impl->pipeline->attach_checkpointing(impl->activations);
  if (config.wall_clock_breakdown)
    impl->timers.sync_device_at_boundaries(ordered[0].second.device());
  impl->optimizer = detail::make_optimizer(config, swap_folders, comm->rank());
  impl->optimizer->init_state(impl->stage->optimizer_shards());
  if (impl->optimizer->wants_grad_copies()) {
    ShardOptimizer* optimizer = impl->optimizer.get();
    StepTimers* timers = &impl->timers;
    impl->stage->set_grad_ready([optimizer, timers](int group, int64_t begin, int64_t numel) {
      ScopedPart part(timers, TimerPart::kOffloadCopy);
      optimizer->grad_ready(group, begin, numel);
    });
  }
  impl->schedule = LrSchedule::create(config.scheduler, config.optimizer.lr);
  // OneCycle's cycle_momentum writes (momentum, 0.99) into the optimizer's betas before every
  // step; DeepSpeed disables it, with a warning, for optimizers without betas (SGD).
  const LrSchedule& schedule = *impl->schedule;
  if (schedule.momentum_at(0) || schedule.momentum_at(1)) {
    impl->cycle_momentum =
        impl->optimizer->set_betas(config.optimizer.betas[0], config.optimizer.betas[1]);
    if (!impl->cycle_momentum && rank == 0)
      spdlog::warn(
          "[rank 0] scheduler: cycle_momentum is disabled because optimizer {} has no betas (as "
          "in DeepSpeed); its momentum stays {}",
          config.optimizer.type, config.optimizer.momentum);
  }

  const int64_t padded_numel = impl->stage->layout().total_padded_numel();
  const std::string optimizer_type = config.optimizer.type;
  const std::string precision =
      detail::str(impl->compute_dtype == at::kFloat  ? "fp32"
                  : impl->compute_dtype == at::kHalf ? "fp16 with fp32 masters"
                                                     : "bf16 with fp32 masters",
                  impl->scaler ? ", loss " + impl->scaler->describe() : std::string());
  std::string states_at =
      impl->optimizer->location() == "device"
          ? std::string()
          : detail::str(" (master and moments on ", impl->optimizer->location(), ")");
  if (sopts.param_store)
    states_at += detail::str(", parameter shards on ", sopts.param_store->location());
  impl->monitors = EngineMonitors::create(config, rank);
  impl->observe_after_init();
  detail::register_engine_model(impl.get());  // zero::load_state_dict(model, ...) finds it
  Engine::Impl& made = *impl;
  Engine engine(std::move(impl));
  if (rank == 0) {
    const std::string ranks = grid && grid->tensor_size() > 1
                                  ? detail::str("the data group of ", grid->to_string())
                                  : detail::str(comm->world_size(), " ranks");
    const std::string transport = std::string(comm->transport());
    const std::string over = comm->backend() == Backend::kNccl ? "NCCL"
                             : transport == "shm"              ? "Gloo over shared memory"
                             : transport == "tcp"              ? "Gloo over TCP"
                                                               : "one process";
    const bool shared = made.stage->host_shared_params();
    spdlog::info(
        "[rank 0] ZeRO stage {} on {} ({}{}): {} trainable parameters ({} elements padded), "
        "optimizer {}{}, {}",
        stage, ranks, over, shared ? ", one parameter copy shared on the host" : "", specs.size(),
        padded_numel, optimizer_type, states_at, precision);
    // The config warned already where its own settings exclude it.
    const ZeroOptimizationConfig& z = config.zero_optimization;
    if (z.host_shared_params && !shared && !z.host_shared_params_excluded_by())
      spdlog::warn(
          "[rank 0] zero_optimization.host_shared_params: no effect: the data group's ranks do not "
          "share memory here ({})",
          over);
    spdlog::info("[rank 0] memory{}: {}",
                 grid && grid->tensor_size() > 1 ? " (rank 0's slices, " + grid->to_string() + ")"
                                                 : std::string(),
                 engine.memory_report().to_string());
  }
  // A job zerorun (or torchrun) restarted goes on from the last checkpoint of checkpoint.save_dir.
  if (const int restart = detail::restart_count(); restart > 0) {
    const std::string& dir = config.checkpoint.save_dir;
    if (dir.empty()) {
      if (rank == 0)
        spdlog::warn(
            "[rank 0] restart {} of the job, but checkpoint.save_dir is not set: "
            "starting from the beginning",
            restart);
    } else {
      if (rank == 0)
        spdlog::info("[rank 0] restart {} of the job on {} ranks: resuming from {}/latest", restart,
                     comm->world_size(), dir);
      made.resumed = engine.load_checkpoint(dir);
    }
  }
  // What building the engine held for a while (the whole model gathered once, a load's reads)
  // goes back now, as glibc gives back large blocks when they are freed.
  host_pool_trim();
  return engine;
}

int detail::restart_count() {
  for (const char* name : {"ZERO_RESTART_COUNT", "TORCHELASTIC_RESTART_COUNT"})
    if (const char* v = std::getenv(name); v && *v) {
      char* end = nullptr;
      const long n = std::strtol(v, &end, 10);
      ZERO_CHECK(*end == 0 && n >= 0, UsageError, name, "='", v, "': expected a count >= 0");
      return static_cast<int>(n);
    }
  return 0;
}

const std::optional<LoadedCheckpoint>& Engine::resumed() const {
  return impl_->resumed;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&& other) noexcept {
  if (this != &other) {
    if (impl_ && impl_->sampler) impl_->sampler->engine_ = nullptr;
    impl_ = std::move(other.impl_);
  }
  return *this;
}
Engine::~Engine() {
  if (impl_ && impl_->sampler) impl_->sampler->engine_ = nullptr;
}

void Engine::zero_grad() {
  impl_->stage->zero_grad();
}
bool Engine::is_gradient_accumulation_boundary() const {
  return impl_->boundary();
}
int64_t Engine::global_steps() const {
  return impl_->global_steps;
}
int64_t Engine::micro_steps() const {
  return impl_->micro_steps;
}
double Engine::lr() const {
  return impl_->schedule->lr_at(impl_->scheduler_steps);
}
double Engine::loss_scale() const {
  return impl_->scaler ? impl_->scaler->scale() : 1.0;
}
int64_t Engine::skipped_steps() const {
  return impl_->skipped_steps;
}
double Engine::last_grad_norm() const {
  return impl_->last_grad_norm;
}
int Engine::rank() const {
  return impl_->comm->rank();
}
int Engine::world_size() const {
  return impl_->comm->world_size();
}
int Engine::data_parallel_size() const {
  return impl_->data->world_size();
}
int Engine::tensor_parallel_size() const {
  return impl_->tensor_size;
}
int Engine::stage() const {
  return impl_->stage->stage();
}
const Config& Engine::config() const {
  return impl_->config;
}

std::shared_ptr<ActivationCheckpointing> Engine::activation_checkpointing() const {
  return impl_->activations;
}

std::vector<std::pair<std::string, at::Tensor>> Engine::full_parameters() {
  Impl& s = *impl_;
  s.stage->gather_all();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < s.params.size(); ++i) {
    const auto split = s.split_dims.find(s.params[i].unsafeGetTensorImpl());
    // Every tensor rank gathers its slices in the same (layout) order.
    out.emplace_back(s.names[i],
                     split == s.split_dims.end() || s.tensor_size == 1
                         ? s.params[i].detach().clone()
                         : detail::whole_of_slices(*s.tensor, s.params[i], split->second));
  }
  s.stage->release_all();
  return s.pipeline ? detail::pipeline_gather_stages(s, std::move(out)) : out;
}

}  // namespace zero
