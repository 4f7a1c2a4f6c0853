// One training step: Engine::backward (DeepSpeed's loss / accumulation order, the stage's
// reductions) and, at an accumulation boundary, Engine::step's optimizer step (the global norm
// doubling as the overflow check, clipping, the update), then the periodic save.
#include "engine_impl.h"

#include <zero/comm/comms_log.h>
#include <zero/engine/engine.h>
#include <zero/kernels/math.h>

#include <ATen/ATen.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <sstream>

namespace zero {

namespace {

std::string shape_of(const at::Tensor& t) {
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

}  // namespace

void Engine::backward(const at::Tensor& loss) {
  Impl& s = *impl_;
  ZERO_CHECK(!s.pipeline, UsageError,
             "backward: the model is a pipeline; train with engine.train_batch(next_micro_batch)");
  ZERO_CHECK(loss.defined() && loss.numel() == 1, UsageError,
             "backward: the loss must be a scalar "
             "(one element); got ",
             loss.defined() ? "a tensor of shape " + shape_of(loss) : "an undefined tensor",
             ". Reduce it first, e.g. loss.mean()");
  ZERO_CHECK(loss.requires_grad(), UsageError,
             "backward: the loss does not require grad (computed "
             "under NoGradGuard, or from no trainable parameter)");
  // With an overflow check a non-finite loss skips the step (its gradients are non-finite).
  if (!s.check_overflow) {
    const double value = loss.item<double>();
    if (!std::isfinite(value))
      throw NonFiniteLossError(detail::str(
          "backward: the loss is ", value, " on rank ", s.comm->rank(), " at step ", s.global_steps,
          " (micro-step ", s.micro_steps, "); ",
          s.compute_dtype == at::kFloat ? "fp32 training" : "bf16 without check_grad_overflow",
          " has no way to skip the step"));
  }
  s.before_backward(loss);
  CommsLog::CallerScope caller("backward");
  const bool boundary = s.boundary();
  {
    ScopedPart inner(&s.timers, TimerPart::kBwdInner);
    s.stage->start_backward(boundary);
    // Buckets fill at the same point of backward on every rank, whatever layers the forward
    // skipped on some (Stage::expect_no_grad); one rank has no peer to wait for.
    if (s.reducing->world_size() > 1) s.stage->expect_no_grad(s.params_outside_graph(loss));
    // DeepSpeed's order: loss / gradient_accumulation_steps, then (fp16) float(loss) * scale.
    const int64_t gas = s.config.gradient_accumulation_steps;
    at::Tensor scaled = gas > 1 ? loss / static_cast<double>(gas) : loss;
    if (s.scaler) scaled = scaled.to(at::kFloat) * s.scaler->scale();
    scaled.backward();
  }
  {
    ScopedPart reduce(&s.timers, TimerPart::kBwdAllreduce);
    s.stage->finish_backward();
  }
  s.backward_since_step = true;
  s.after_backward();
}

// CPU shards through the vectorized kernels (summed on the host); shards on a GPU summed there
// and read back once, together with the all-reduce when the shards differ across ranks. With
// tensor parallelism every element is counted once over the world: a shard replicated over the
// data group (stage 0) only on data rank 0, a group of replicated (not split) parameters only
// on tensor rank 0; then one all-reduce over the world.
double Engine::Impl::global_grad_norm(const std::vector<OptimizerShard>& shards) {
  const bool replicated = stage->shards_replicated();
  double host_sum = 0;
  at::Tensor device_sum;  // double, on the shards' device
  for (const auto& sh : shards) {
    const at::Tensor& g = sh.grad;
    if (g.numel() == 0) continue;
    if (tensor_size > 1 && !stage->layout().groups()[sh.group].tensor_split && tensor_rank != 0)
      continue;
    if (stage->layout().groups()[sh.group].tied_copy) continue;  // its tie's first stage counts it
    if ((tensor_size > 1 || pipeline_size > 1) && replicated && data->rank() != 0) continue;
    if (replicas && replicas->rank() != 0) continue;  // MiCS: the first shard group counts it
    const bool cpu = g.is_cpu() && g.is_contiguous();
    if (cpu && g.scalar_type() == at::kFloat) {
      host_sum += kernels::sum_squares_cpu(g.data_ptr<float>(), g.numel());
    } else if (cpu && (g.scalar_type() == at::kHalf || g.scalar_type() == at::kBFloat16)) {
      host_sum += kernels::sum_squares_cpu(
          static_cast<const uint16_t*>(g.data_ptr()),
          g.scalar_type() == at::kHalf ? kernels::Half16::kFp16 : kernels::Half16::kBf16,
          g.numel());
    } else {
      at::Tensor sq = at::linalg_vector_norm(g, 2, c10::nullopt, false, at::kDouble).square();
      device_sum = device_sum.defined() ? device_sum + sq : sq;
    }
  }
  if ((replicated && tensor_size == 1 && pipeline_size == 1) || comm->world_size() == 1)
    return std::sqrt(host_sum + (device_sum.defined() ? device_sum.item<double>() : 0.0));
  // The collectives take fp32 (a sum of squares of finite fp16 gradients fits easily).
  // One tensor for every step: a steady step allocates nothing of the engine's own.
  const at::Device device = shards[0].grad.device();
  if (!norm_sum.defined() || norm_sum.device() != device)
    norm_sum = at::empty({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  norm_sum.fill_(host_sum);
  if (device_sum.defined()) norm_sum.add_(device_sum.to(at::kFloat));
  comm->all_reduce(norm_sum, ReduceOp::kSum)->wait();
  return std::sqrt(norm_sum.item<double>());
}

std::vector<OptimizerShard> Engine::Impl::optimizer_shards() const {
  std::vector<OptimizerShard> shards = stage->optimizer_shards();
  for (size_t i = 0; i < shards.size(); ++i)
    if (at::Tensor master = optimizer->master(i); master.defined()) shards[i].master = master;
  return shards;
}

// One optimizer step on the accumulation boundary. The global norm (all ranks' sum of squares,
// all-reduced) doubles as the overflow check every rank agrees on: any inf/NaN gradient on any
// rank makes it non-finite everywhere. On overflow the step is skipped as DeepSpeed does:
// gradients dropped, the LR schedule and Adam's step count stay, global_steps advances.
void Engine::Impl::optimizer_step() {
  std::vector<OptimizerShard> shards = stage->optimizer_shards();
  const double scale = scaler ? scaler->scale() : 1.0;
  const double norm = global_grad_norm(shards) / scale;
  const bool overflow = check_overflow && !std::isfinite(norm);
  if (scaler) scaler->update(overflow);  // throws LossScaleError at min_loss_scale
  ++global_steps;
  if (overflow) {
    ++skipped_steps;
    if (comm->rank() == 0)
      spdlog::info("[rank 0] step {}: inf/NaN gradients, step skipped ({} skipped so far){}",
                   global_steps, skipped_steps,
                   scaler ? detail::str("; loss scale ", scale, " -> ", scaler->scale()) : "");
    stage->zero_grad();
    optimizer->drop_gradients();
    // Unchanged parameters, but stage 3 released every unit at the end of backward and gathers
    // the rest of the model (unit 0) for the next forward here.
    stage->publish_parameters();
    return;  // the reported norm stays the last applied step's, as DeepSpeed's optimizers do
  }
  last_grad_norm = norm;
  // Unscaling and clipping fused into the optimizer: gradients / (scale * clip factor), with
  // DeepSpeed's factor (norm + 1e-6) / clip applied when it exceeds 1.
  double divisor = scale;
  const double clip = config.gradient_clipping;
  if (clip > 0) {
    const double factor = (norm + 1e-6) / clip;
    if (factor > 1) divisor *= factor;
  }
  if (cycle_momentum)
    if (const auto beta1 = schedule->momentum_at(scheduler_steps))
      optimizer->set_betas(*beta1, LrSchedule::kCycleBeta2);
  optimizer->step(shards, schedule->lr_at(scheduler_steps), optimizer_steps + 1, divisor);
  ++optimizer_steps;
  ++scheduler_steps;
  stage->publish_parameters();
  stage->zero_grad();
}

void Engine::step() {
  Impl& s = *impl_;
  ZERO_CHECK(!s.pipeline, UsageError,
             "step: the model is a pipeline; train with engine.train_batch(next_micro_batch)");
  ZERO_CHECK(s.backward_since_step, UsageError,
             "step() called without backward() since the last "
             "step() (rank ",
             s.comm->rank(), ", micro-step ", s.micro_steps,
             "); call "
             "engine.backward(loss) once per micro-batch before engine.step()");
  s.backward_since_step = false;
  const bool boundary = s.boundary();
  if (boundary && !s.config.zero_optimization.ignore_unused_parameters) s.check_unused_parameters();
  s.timers.enter();
  ++s.micro_steps;
  if (boundary) {
    CommsLog::CallerScope caller("step");
    s.optimizer_step();
  }
  s.timers.leave(TimerPart::kStep);
  if (boundary) {
    s.after_optimizer_step();
    save_if_due();
  }
}

void Engine::save_if_due() {
  const CheckpointConfig& c = impl_->config.checkpoint;
  if (c.save_interval_steps > 0 && impl_->global_steps % c.save_interval_steps == 0)
    save_checkpoint(c.save_dir);
}

}  // namespace zero
