// zero::Sharded: forward runs the stage 3 unit protocol around the wrapped block and puts a
// PreBackward autograd node on its output, whose backward re-gathers the block.
#include <zero/core/stage.h>
#include <zero/engine/init.h>
#include <zero/engine/sharded.h>
#include <zero/error.h>

#include <ATen/record_function.h>
#include <torch/csrc/autograd/custom_function.h>

#include "observe/flops_profiler.h"
#include "observe/step_timers.h"

namespace zero {
namespace {

// Identity in forward; in backward, gathers the unit before autograd reaches the block.
struct PreBackward : public torch::autograd::Function<PreBackward> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                            int64_t stage, int64_t unit, int64_t timers) {
    ctx->saved_data["stage"] = stage;
    ctx->saved_data["unit"] = unit;
    ctx->saved_data["timers"] = timers;
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* stage = reinterpret_cast<Stage*>(static_cast<intptr_t>(ctx->saved_data["stage"].toInt()));
    auto* timers =
        reinterpret_cast<StepTimers*>(static_cast<intptr_t>(ctx->saved_data["timers"].toInt()));
    {
      ScopedPart wait(timers, TimerPart::kGatherWait);
      stage->pre_backward(static_cast<int>(ctx->saved_data["unit"].toInt()));
    }
    return {grads[0], at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

ShardedImpl::ShardedImpl(torch::nn::AnyModule inner) : inner_(std::move(inner)) {
  ZERO_CHECK(!inner_.is_empty(), UsageError, "zero::Sharded: no module to wrap");
  ZERO_CHECK(!std::dynamic_pointer_cast<ShardedImpl>(inner_.ptr()), UsageError,
             "zero::Sharded: this block is already wrapped in zero::Sharded; wrap each block once");
  register_module("inner", inner_.ptr());
  if (const Init* init = Init::active()) {
    shards_ = init->partition(*inner_.ptr());
    partitioned_ = true;
  }
}

void ShardedImpl::attach(Stage* stage, int unit) {
  ZERO_CHECK(stage == nullptr || stage_ == nullptr || stage_ == stage, UsageError,
             "zero::Sharded: this block is already managed by another live engine");
  stage_ = stage;
  unit_ = stage ? unit : -1;
}

void ShardedImpl::observe(StepTimers* timers, const std::string& name) {
  timers_ = timers;
  scope_name_ = std::string(kModuleScopePrefix) + (name.empty() ? "zero::Sharded" : name);
}

at::Tensor ShardedImpl::forward(const at::Tensor& input) {
  // A module scope for the flops profiler (free while no RecordFunction callback is active).
  at::RecordFunction scope(at::RecordScope::USER_SCOPE);
  if (scope.isActive()) scope.before(scope_name_.c_str());
  if (!stage_) return inner_.forward(input);
  {
    ScopedPart wait(timers_, TimerPart::kGatherWait);
    stage_->pre_forward(unit_);
  }
  at::Tensor out;
  try {
    out = inner_.forward(input);
  } catch (...) {
    stage_->post_forward(unit_);
    throw;
  }
  stage_->post_forward(unit_);
  if (at::GradMode::is_enabled() && out.requires_grad()) {
    out = PreBackward::apply(out, static_cast<int64_t>(reinterpret_cast<intptr_t>(stage_)),
                             static_cast<int64_t>(unit_),
                             static_cast<int64_t>(reinterpret_cast<intptr_t>(timers_)));
  }
  return out;
}

}  // namespace zero
