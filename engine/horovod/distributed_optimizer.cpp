// zero::DistributedOptimizer: a program's own torch::optim optimizer over the engine's stage 0
// (flat buffers, gradient hooks, fused all-reduce buckets) on the engine's world communicator.
#include "world_setup.h"

#include <zero/config/config.h>
#include <zero/core/stage.h>
#include <zero/engine/horovod/distributed_optimizer.h>
#include <zero/tp/layers.h>
#include <zero/core/float_type_torch.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <cstdlib>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace zero {
namespace {

constexpr int64_t kDefaultFusionBytes = 64 << 20;  // Horovod's default threshold

int64_t fusion_bytes_from_env() {
  for (const char* name : {"ZERO_FUSION_THRESHOLD", "HOROVOD_FUSION_THRESHOLD"}) {
    const char* v = std::getenv(name);
    if (!v || !*v) continue;
    char* end = nullptr;
    const long long bytes = std::strtoll(v, &end, 10);
    ZERO_CHECK(end && *end == '\0' && bytes > 0, ConfigError, name, "='", v,
               "': expected a positive number of bytes");
    return bytes;
  }
  return kDefaultFusionBytes;
}

c10::ScalarType wire_dtype(Compression c) {
  switch (c) {
    case Compression::kFp16:
      return at::kHalf;
    case Compression::kBf16:
      return at::kBFloat16;
    case Compression::kNone:
      break;
  }
  return c10::ScalarType::Undefined;
}

}  // namespace

DistributedOptions DistributedOptions::from_config(const Config& config) {
  DistributedOptions o;
  o.backward_passes_per_step =
      static_cast<int>(std::max<int64_t>(1, config.gradient_accumulation_steps));
  const std::string& wire = config.communication_data_type;
  o.compression = wire == "fp16"   ? Compression::kFp16
                  : wire == "bf16" ? Compression::kBf16
                                   : Compression::kNone;
  // reduce_bucket_size counts elements of what is reduced: 2 bytes each when they travel or
  // train in fp16/bf16, else 4 (fp32 gradients).
  const bool two_bytes =
      o.compression != Compression::kNone || config.fp16.enabled || config.bf16.enabled;
  o.fusion_threshold_bytes = config.zero_optimization.reduce_bucket_size * (two_bytes ? 2 : 4);
  return o;
}

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           torch::nn::Module& model, DistributedOptions options)
    : optimizer_(std::move(optimizer)), passes_per_step_(options.backward_passes_per_step) {
  ZERO_CHECK(optimizer_, UsageError, "DistributedOptimizer: no optimizer");
  // It averages every gradient over the whole world, which would mix different slices.
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true))
    if (const auto* layer = dynamic_cast<const tp::TensorParallelModule*>(item.value().get()))
      ZERO_CHECK(!layer->tensor_group() || layer->tensor_group()->world_size() == 1, UsageError,
                 "DistributedOptimizer: '", item.key(),
                 "' is a tensor-parallel layer; use zero::initialize(model, config, grid), which "
                 "reduces over the data-parallel group only");
  ZERO_CHECK(passes_per_step_ >= 1, UsageError,
             "DistributedOptimizer: backward_passes_per_step must be >= 1, got ", passes_per_step_);
  comm_ = options.comm ? options.comm : detail::communicator_for(model);

  // The optimizer's trainable parameters, each once, in reverse registration order in the model
  // (roughly the order backward produces their gradients, so buckets fill one after another).
  std::unordered_set<const c10::TensorImpl*> wanted;
  for (const auto& group : optimizer_->param_groups())
    for (const at::Tensor& p : group.params())
      if (p.requires_grad()) wanted.insert(p.unsafeGetTensorImpl());
  ZERO_CHECK(!wanted.empty(), UsageError,
             "DistributedOptimizer: the optimizer has no trainable parameters");
  std::vector<std::pair<std::string, at::Tensor>> ordered;
  std::unordered_set<const c10::TensorImpl*> seen;
  for (const auto& item : model.named_parameters(/*recurse=*/true)) {
    const c10::TensorImpl* impl = item.value().unsafeGetTensorImpl();
    if (wanted.count(impl) && seen.insert(impl).second)
      ordered.emplace_back(item.key(), item.value());
  }
  ZERO_CHECK(ordered.size() == wanted.size(), UsageError,
             "DistributedOptimizer: ", wanted.size() - ordered.size(),
             " parameter(s) of the optimizer are not parameters of the model; pass the module "
             "whose parameters the optimizer updates");
  const at::Device device = ordered[0].second.device();
  std::vector<ParamSpec> specs;
  std::vector<at::Tensor> params;
  for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
    ZERO_CHECK(it->second.device() == device, UsageError, "DistributedOptimizer: parameter '",
               it->first, "' is on ", it->second.device(), ", '", ordered[0].first, "' on ", device,
               "; move the whole model to one device first");
    ParamSpec spec;
    spec.name = it->first;
    spec.numel = it->second.numel();
    spec.dtype = float_type_of(it->second.scalar_type(), spec.name);
    specs.push_back(spec);
    params.push_back(it->second);
  }

  StageOptions sopts;
  sopts.stage = 0;
  sopts.comm_dtype = wire_dtype(options.compression);
  const int64_t bytes =
      options.fusion_threshold_bytes > 0 ? options.fusion_threshold_bytes : fusion_bytes_from_env();
  sopts.reduce_bucket_numel = std::max<int64_t>(1, bytes / float_type_bytes(specs[0].dtype));
  LayoutOptions lopts;
  lopts.world_size = comm_->world_size();
  lopts.align_bytes = sopts.align_bytes;
  lopts.bucket_numel = sopts.reduce_bucket_numel;
  FlatLayout layout = FlatLayout::build(specs, lopts);
  detail::check_same_layout(*comm_, layout, device, "DistributedOptimizer");
  stage_ = Stage::create(sopts, std::move(params), std::move(layout), comm_);
  stage_->set_implicit_passes(passes_per_step_);
}

DistributedOptimizer::~DistributedOptimizer() = default;

int DistributedOptimizer::rank() const {
  return comm_->rank();
}

int DistributedOptimizer::size() const {
  return comm_->world_size();
}

void DistributedOptimizer::zero_grad() {
  ZERO_CHECK(stage_->implicit_passes_begun() == 0, UsageError,
             "DistributedOptimizer::zero_grad() after ", stage_->implicit_passes_begun(),
             " backward pass(es) and before step(): their gradients would be lost on this rank "
             "while the other ranks reduce theirs");
  stage_->zero_grad();
}

void DistributedOptimizer::synchronize() {
  if (synchronized_) return;
  const int begun = stage_->implicit_passes_begun();
  ZERO_CHECK(
      begun == passes_per_step_, UsageError, "DistributedOptimizer: step() after ", begun,
      " backward pass(es); backward_passes_per_step is ", passes_per_step_,
      begun == 0 ? " (no gradient arrived since the last step: call loss.backward() first)" : "");
  stage_->finish_backward();
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  synchronize();
  synchronized_ = false;
  optimizer_->step();
}

}  // namespace zero
