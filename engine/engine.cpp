// Engine and zero::initialize: collects the model's trainable parameters and wrapped blocks,
// checks that all ranks agree, builds the layout, stage, optimizer and LR schedule, and runs
// backward / step with DeepSpeed's accumulation, clipping and scheduling semantics.
#include <zero/comm/process_group.h>
#include <zero/core/optimizer.h>
#include <zero/core/stage.h>
#include <zero/engine/engine.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/sharded.h>
#include <zero/kernels/math.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>
#include <torch/nn/module.h>

#include <cmath>
#include <mutex>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace zero {

struct Engine::Impl {
  std::shared_ptr<torch::nn::Module> model;
  Config config;
  std::shared_ptr<Communicator> comm;
  std::vector<at::Tensor> params;  // layout order
  std::vector<std::string> names;  // layout order
  std::vector<ShardedImpl*> wrappers;
  std::unique_ptr<Stage> stage;
  std::unique_ptr<ShardOptimizer> optimizer;
  std::unique_ptr<LrSchedule> schedule;
  int64_t micro_steps = 0;
  int64_t global_steps = 0;
  bool backward_since_step = false;
  double last_grad_norm = 0;
  bool cycle_momentum = false;  // the schedule sets beta1 (and beta2) before each step

  ~Impl() {
    for (ShardedImpl* w : wrappers) w->attach(nullptr, -1);
  }
  bool boundary() const { return (micro_steps + 1) % config.gradient_accumulation_steps == 0; }
  double global_grad_norm(const std::vector<OptimizerShard>& shards) const;
  void optimizer_step();
};

namespace {

std::string mb(int64_t bytes) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(2);
  out << static_cast<double>(bytes) / (1024.0 * 1024.0) << " MiB";
  return out.str();
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

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
  ZERO_CHECK(!c.fp16.enabled && !c.bf16.enabled, ConfigError,
             "fp16/bf16: mixed precision is not supported by this build yet; train in fp32 "
             "(remove fp16.enabled / bf16.enabled)");
  ZERO_CHECK(c.zero_optimization.offload_optimizer.device == "none" &&
                 c.zero_optimization.offload_param.device == "none",
             ConfigError,
             "zero_optimization.offload_optimizer/offload_param: offloading is not "
             "supported by this build yet; set device to \"none\"");
  ZERO_CHECK(!c.optimizer.type.empty(), ConfigError,
             "optimizer.type: the ds_config must name an optimizer (Adam, AdamW or SGD)");
  ZERO_CHECK(!c.optimizer.amsgrad, ConfigError, "optimizer.params.amsgrad: not supported");
  ZERO_CHECK(c.gradient_accumulation_steps >= 1, ConfigError,
             "gradient_accumulation_steps must be >= 1, got ", c.gradient_accumulation_steps);
}

OptimizerOptions optimizer_options(const OptimizerConfig& o) {
  OptimizerOptions out;
  out.kind = parse_optimizer_kind(o.type);
  // DeepSpeed's "Adam" is AdamW unless adam_w_mode is false (the config resolves it).
  if (out.kind == OptimizerKind::kAdam && o.adam_w_mode) out.kind = OptimizerKind::kAdamW;
  out.beta1 = o.betas[0];
  out.beta2 = o.betas[1];
  out.eps = o.eps;
  out.weight_decay = o.weight_decay;
  out.bias_correction = o.bias_correction;
  out.momentum = o.momentum;
  out.dampening = o.dampening;
  out.nesterov = o.nesterov;
  return out;
}

StageOptions stage_options(const ZeroOptimizationConfig& z) {
  StageOptions s;
  s.stage = z.stage;
  s.reduce_bucket_numel = z.reduce_bucket_size;
  s.allgather_bucket_numel = z.allgather_bucket_size;
  s.overlap_comm = z.overlap_comm;
  s.prefetch_numel = z.stage3_prefetch_bucket_size;
  s.persistence_threshold_numel = z.stage3_param_persistence_threshold;
  s.max_live_numel = z.stage3_max_live_parameters;
  s.max_reuse_distance_numel = z.stage3_max_reuse_distance;
  return s;
}

// All ranks must build the same layout: compare a hash of it before any sized collective.
void check_same_layout(Communicator& comm, const FlatLayout& layout, at::Device device) {
  const int world = comm.world_size();
  if (world == 1) return;
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor mine = at::full({1}, static_cast<int64_t>(layout.hash()), opts);
  at::Tensor all = at::empty({world}, opts);
  comm.all_gather(mine, all)->wait();
  all = all.cpu();
  std::vector<int> differ;
  for (int r = 0; r < world; ++r)
    if (all[r].item<int64_t>() != all[0].item<int64_t>()) differ.push_back(r);
  if (differ.empty()) return;
  std::ostringstream ranks;
  for (int r : differ) ranks << (ranks.tellp() > 0 ? ", " : "") << r;
  throw UsageError(detail::str(
      "initialize: the model or ZeRO config differs across ranks: the parameter layout of rank(s) ",
      ranks.str(), " differs from rank 0's (rank ", comm.rank(), ": ", layout.params().size(),
      " parameters, ", layout.total_padded_numel(),
      " elements); every rank must build the same model"));
}

}  // namespace

std::string MemoryReport::to_string() const {
  std::ostringstream out;
  out << "model states " << mb(model_states_bytes()) << " (params " << mb(parameters_bytes)
      << ", grads " << mb(gradients_bytes) << ", master " << mb(master_params_bytes)
      << ", optimizer " << mb(optimizer_states_bytes) << "), comm buffers "
      << mb(comm_buffers_bytes) << ", gathered " << mb(gathered_params_bytes) << " (peak "
      << mb(peak_gathered_params_bytes) << ")";
  return out.str();
}

std::shared_ptr<Communicator> world_communicator() {
  static std::mutex mutex;
  static std::shared_ptr<Communicator> world;
  std::lock_guard<std::mutex> lock(mutex);
  if (!world) world = init_communicator(detect_rank_env());
  return world;
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const std::string& config_path,
                  const std::map<std::string, std::string>& overrides) {
  auto comm = world_communicator();
  ConfigOptions options;
  options.world_size = comm->world_size();
  options.overrides = overrides;
  return initialize(std::move(model), parse_config_file(config_path, options), comm);
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& config) {
  return initialize(std::move(model), config, world_communicator());
}

Engine initialize(std::shared_ptr<torch::nn::Module> model, const ParsedConfig& parsed,
                  std::shared_ptr<Communicator> comm) {
  ZERO_CHECK(model, UsageError, "initialize: no model");
  ZERO_CHECK(comm, UsageError, "initialize: no communicator");
  auto impl = std::make_unique<Engine::Impl>();
  impl->model = model;
  impl->config = parsed.config;
  impl->comm = comm;
  const Config& config = impl->config;
  const int rank = comm->rank();
  ZERO_CHECK(config.world_size == comm->world_size(), ConfigError,
             "the config's batch sizes were "
             "resolved for world_size ",
             config.world_size, " but the job has ", comm->world_size(),
             " ranks; parse it with ConfigOptions::world_size = ", comm->world_size());
  check_config(config);
  if (rank == 0)
    for (const auto& w : parsed.warnings) spdlog::warn("[rank 0] config: {}", w.to_string());
  const int stage = config.zero_optimization.stage;

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
    ZERO_CHECK(p.scalar_type() == at::kFloat, UsageError, "initialize: parameter '", name, "' is ",
               p.scalar_type(), "; fp32 training needs float32 parameters");
  }

  // Units: wrapped blocks are units 1..K, the rest of the model unit 0.
  impl->wrappers = find_wrappers(*model);
  std::unordered_map<const c10::TensorImpl*, int> unit_of;
  std::vector<UnitSpec> units{{"(rest of the model)"}};
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
    ZERO_CHECK(!impl->wrappers.empty(), UsageError,
               "ZeRO stage 3 needs the model's blocks "
               "wrapped in zero::Sharded (LibTorch modules have no forward hooks); the model has "
               "none. Wrap each transformer block: blocks[i] = zero::Sharded(block)");

  // Layout order: reverse registration order, which is roughly gradient arrival order.
  const StageOptions sopts = stage_options(config.zero_optimization);
  std::vector<ParamSpec> specs;
  for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
    ParamSpec spec;
    spec.name = it->first;
    spec.numel = it->second.numel();
    spec.dtype = it->second.scalar_type();
    if (stage == 3) {
      auto u = unit_of.find(it->second.unsafeGetTensorImpl());
      spec.unit = u == unit_of.end() ? 0 : u->second;
      spec.persistent = spec.numel <= sopts.persistence_threshold_numel;
    }
    specs.push_back(spec);
    impl->params.push_back(it->second);
    impl->names.push_back(it->first);
  }
  LayoutOptions lopts;
  lopts.world_size = comm->world_size();
  lopts.align_bytes = sopts.align_bytes;
  lopts.bucket_numel = sopts.reduce_bucket_numel;
  FlatLayout layout = FlatLayout::build(specs, lopts);
  check_same_layout(*comm, layout, ordered[0].second.device());

  impl->stage = Stage::create(sopts, impl->params, std::move(layout), comm,
                              stage == 3 ? units : std::vector<UnitSpec>{});
  for (size_t k = 0; k < impl->wrappers.size(); ++k)
    impl->wrappers[k]->attach(stage == 3 ? impl->stage.get() : nullptr, static_cast<int>(k + 1));
  impl->optimizer = ShardOptimizer::create(optimizer_options(config.optimizer));
  impl->optimizer->init_state(impl->stage->optimizer_shards());
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
  Engine engine(std::move(impl));
  if (rank == 0) {
    spdlog::info(
        "[rank 0] ZeRO stage {} on {} ranks: {} trainable parameters ({} elements "
        "padded), optimizer {}",
        stage, comm->world_size(), specs.size(), padded_numel, optimizer_type);
    spdlog::info("[rank 0] memory: {}", engine.memory_report().to_string());
  }
  return engine;
}

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;
Engine::~Engine() = default;

void Engine::backward(const at::Tensor& loss) {
  Impl& s = *impl_;
  ZERO_CHECK(loss.defined() && loss.numel() == 1, UsageError,
             "backward: the loss must be a scalar "
             "(one element); got ",
             loss.defined() ? "a tensor of shape " + shape_of(loss) : "an undefined tensor",
             ". Reduce it first, e.g. loss.mean()");
  ZERO_CHECK(loss.requires_grad(), UsageError,
             "backward: the loss does not require grad (computed "
             "under NoGradGuard, or from no trainable parameter)");
  const double value = loss.item<double>();
  if (!std::isfinite(value))
    throw NonFiniteLossError(detail::str(
        "backward: the loss is ", value, " on rank ", s.comm->rank(), " at step ", s.global_steps,
        " (micro-step ", s.micro_steps, "); fp32 training has no loss scaler to skip the step"));
  const bool boundary = s.boundary();
  s.stage->start_backward(boundary);
  const int64_t gas = s.config.gradient_accumulation_steps;
  at::Tensor scaled = gas > 1 ? loss / static_cast<double>(gas) : loss;
  scaled.backward();
  s.stage->finish_backward();
  s.backward_since_step = true;
}

double Engine::Impl::global_grad_norm(const std::vector<OptimizerShard>& shards) const {
  double sum = 0;
  for (const auto& sh : shards) {
    if (sh.grad.numel() == 0) continue;
    if (sh.grad.is_cpu() && sh.grad.scalar_type() == at::kFloat && sh.grad.is_contiguous())
      sum += kernels::sum_squares_cpu(sh.grad.data_ptr<float>(), sh.grad.numel());
    else
      sum += sh.grad.to(at::kDouble).square().sum().item<double>();
  }
  if (!stage->shards_replicated() && comm->world_size() > 1) {
    at::Tensor t =
        at::full({1}, sum, at::TensorOptions().dtype(at::kFloat).device(shards[0].grad.device()));
    comm->all_reduce(t, ReduceOp::kSum)->wait();
    sum = t.item<double>();
  }
  return std::sqrt(sum);
}

void Engine::Impl::optimizer_step() {
  std::vector<OptimizerShard> shards = stage->optimizer_shards();
  const double clip = config.gradient_clipping;
  last_grad_norm = global_grad_norm(shards);
  if (clip > 0) {
    const double coef = clip / (last_grad_norm + 1e-6);
    if (coef < 1)
      for (auto& sh : shards) sh.grad.mul_(coef);
  }
  if (cycle_momentum)
    if (const auto beta1 = schedule->momentum_at(global_steps))
      optimizer->set_betas(*beta1, LrSchedule::kCycleBeta2);
  optimizer->step(shards, schedule->lr_at(global_steps), global_steps + 1);
  stage->publish_parameters();
  stage->zero_grad();
  ++global_steps;
}

void Engine::step() {
  Impl& s = *impl_;
  ZERO_CHECK(s.backward_since_step, UsageError,
             "step() called without backward() since the last "
             "step() (rank ",
             s.comm->rank(), ", micro-step ", s.micro_steps,
             "); call "
             "engine.backward(loss) once per micro-batch before engine.step()");
  s.backward_since_step = false;
  if (s.boundary()) s.optimizer_step();
  ++s.micro_steps;
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
  return impl_->schedule->lr_at(impl_->global_steps);
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
int Engine::stage() const {
  return impl_->stage->stage();
}
const Config& Engine::config() const {
  return impl_->config;
}

MemoryReport Engine::memory_report() const {
  const StageMemory m = impl_->stage->memory();
  MemoryReport r;
  r.parameters_bytes = m.parameters_bytes;
  r.gradients_bytes = m.gradients_bytes;
  r.master_params_bytes = m.master_params_bytes;
  r.optimizer_states_bytes = impl_->optimizer->state_bytes();
  r.comm_buffers_bytes = m.comm_buffers_bytes;
  r.gathered_params_bytes = m.gathered_params_bytes;
  r.peak_gathered_params_bytes = m.peak_gathered_params_bytes;
  r.unit_gathers = m.unit_gathers;
  return r;
}

std::vector<std::pair<std::string, at::Tensor>> Engine::full_parameters() {
  Impl& s = *impl_;
  s.stage->gather_all();
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (size_t i = 0; i < s.params.size(); ++i)
    out.emplace_back(s.names[i], s.params[i].detach().clone());
  s.stage->release_all();
  return out;
}

}  // namespace zero
