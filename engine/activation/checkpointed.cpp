// zero::checkpoint and zero::Checkpointed: an autograd Function whose forward runs the block
// without a graph and saves its input and RNG state; its backward recomputes and back-propagates.
#include <zero/engine/activation/checkpointed.h>
#include "activation/checkpoint_node.h"
#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>
#include <zero/comm/communicator.h>
#include <zero/tp/random.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/cuda.h>

#include <chrono>
#include <optional>

namespace zero {
namespace {

using Clock = std::chrono::steady_clock;

at::Tensor rng_state(at::Generator gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

void set_rng_state(at::Generator gen, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// The RNG states a forward starts from: the CPU's, the CUDA device's when it runs there, and the
// tensor-parallel tracker's (the split regions' dropout).
struct RngStates {
  at::Tensor cpu, cuda;
  std::optional<at::Device> device;
  tp::RngTracker::State tracker;
  static RngStates capture(const at::Device& device) {
    RngStates s;
    s.cpu = rng_state(at::detail::getDefaultCPUGenerator());
    if (device.is_cuda()) {
      s.device = device;
      s.cuda = rng_state(at::globalContext().defaultGenerator(device));
    }
    s.tracker = tp::rng_tracker().state();
    return s;
  }
  void restore() const {
    set_rng_state(at::detail::getDefaultCPUGenerator(), cpu);
    if (device) set_rng_state(at::globalContext().defaultGenerator(*device), cuda);
    tp::rng_tracker().set_state(tracker);
  }
};

void synchronize(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// What one checkpoint keeps for its backward. Destroyed with the autograd node, so a graph that
// is dropped without backward still returns its bytes to the counters.
struct SavedCheckpoint : torch::CustomClassHolder {
  std::function<at::Tensor(const at::Tensor&)> fn;
  std::shared_ptr<ActivationCheckpointing> context;
  at::Tensor input;  // detached; in host memory with cpu_checkpointing on a GPU
  at::Device device{at::kCPU};
  bool requires_grad = false;
  bool on_host = false;
  int64_t bytes = 0;
  int64_t version = 0;  // the input's version: an in-place change before backward is an error
  RngStates rng;
  std::vector<int64_t> sizes;  // of the whole input, when `input` holds this rank's part only

  void save(const at::Tensor& x) {
    at::Tensor kept = x.detach();
    if (const auto& group = context->partition_group()) {
      sizes.assign(x.sizes().begin(), x.sizes().end());
      kept = own_part(kept, *group);
    }
    bytes = kept.numel() * static_cast<int64_t>(kept.element_size());
    on_host = context->config().cpu_checkpointing && x.is_cuda();
    if (on_host) {
      at::Tensor host = offload::host_empty(kept.numel(), kept.scalar_type(), /*pin=*/true);
      input = host.view(kept.sizes()).copy_(kept, /*non_blocking=*/true);
      context->moved(bytes);
    } else {
      input = kept;
      version = x._version();
    }
    context->saved(bytes, on_host);
  }
  at::Tensor restore() {
    at::Tensor kept = input;
    if (on_host) {
      context->moved(bytes);
      kept = input.to(device, /*non_blocking=*/true);
    } else if (sizes.empty()) {
      ZERO_CHECK(input._version() == version, UsageError,
                 "zero::checkpoint: the input of a checkpointed block was modified in place "
                 "after its forward; the recompute would see other values (clone it before "
                 "changing it)");
    }
    return sizes.empty() ? kept : whole_of_parts(kept, *context->partition_group());
  }
  void release() {
    if (!input.defined()) return;
    context->released(bytes, on_host);
    input = at::Tensor();
  }
  ~SavedCheckpoint() override { release(); }

 private:
  // partition_activations: this tensor rank's 1/T of the flat input (padded to T parts), after
  // checking that the input is the same on every rank of the group, as partitioning assumes.
  static at::Tensor own_part(const at::Tensor& x, Communicator& group) {
    const int64_t parts = group.world_size();
    const at::Tensor flat = x.reshape({-1});
    const at::Tensor wide = flat.to(at::kFloat);  // a dtype every backend gathers
    const at::Tensor sums = at::stack({wide.sum(), wide.square().sum()});
    at::Tensor all = at::empty({parts, 2}, sums.options());
    group.all_gather(sums, all)->wait();
    ZERO_CHECK(all.eq(all[0]).all().item<bool>(), UsageError,
               "activation_checkpointing.partition_activations: a checkpointed input differs "
               "across the tensor-parallel ranks (rank ",
               group.rank(),
               "); partitioning needs inputs replicated over the tensor group (not a "
               "sequence-parallel region's part of the sequence)");
    const int64_t part = (flat.numel() + parts - 1) / parts;
    at::Tensor padded = flat;
    if (part * parts != flat.numel())
      padded = at::cat({flat, at::zeros({part * parts - flat.numel()}, flat.options())});
    return padded.narrow(0, group.rank() * part, part).clone();
  }
  at::Tensor whole_of_parts(const at::Tensor& part, Communicator& group) const {
    at::Tensor all = at::empty({group.world_size() * part.numel()}, part.options());
    group.all_gather(part.contiguous(), all)->wait();
    int64_t numel = 1;
    for (int64_t s : sizes) numel *= s;
    return all.narrow(0, 0, numel).view(sizes);
  }
};

struct CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
  // `anchor` requires grad when `input` does not, so that the output still reaches this node's
  // backward (the block's parameters are not inputs of the node).
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& input,
                            const at::Tensor& anchor,
                            const c10::intrusive_ptr<SavedCheckpoint>& saved) {
    const auto& cfg = saved->context->config();
    if (cfg.synchronize_checkpoint_boundary) synchronize(saved->device);
    const auto start = Clock::now();
    saved->rng = RngStates::capture(saved->device);
    at::Tensor out = saved->fn(input);
    saved->save(input);
    if (cfg.profile) {
      synchronize(saved->device);
      saved->context->forward_timed(std::chrono::duration<double>(Clock::now() - start).count());
    }
    if (cfg.synchronize_checkpoint_boundary) synchronize(saved->device);
    ctx->saved_data["checkpoint"] = c10::IValue::make_capsule(saved);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    ZERO_CHECK(torch::autograd::Engine::get_default_engine().is_checkpoint_valid(), UsageError,
               "zero::checkpoint: backward through a checkpoint must come from "
               "loss.backward() (or engine.backward); torch::autograd::grad with explicit inputs "
               "cannot drive a recompute");
    auto saved = c10::static_intrusive_pointer_cast<SavedCheckpoint>(
        ctx->saved_data["checkpoint"].toCapsule());
    const auto& cfg = saved->context->config();
    if (cfg.synchronize_checkpoint_boundary) synchronize(saved->device);
    at::Tensor x = saved->restore().detach().requires_grad_(saved->requires_grad);
    saved->release();
    const auto start = Clock::now();
    const RngStates now = RngStates::capture(saved->device);
    saved->rng.restore();
    at::Tensor out;
    try {
      at::AutoGradMode enable_grad(true);
      out = saved->fn(x);
    } catch (...) {
      now.restore();
      throw;
    }
    now.restore();
    if (cfg.profile) synchronize(saved->device);
    saved->context->recomputed(
        cfg.profile ? std::chrono::duration<double>(Clock::now() - start).count() : 0.0);
    if (grads[0].defined() && out.requires_grad()) torch::autograd::backward({out}, {grads[0]});
    if (cfg.synchronize_checkpoint_boundary) synchronize(saved->device);
    return {saved->requires_grad ? x.grad() : at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool detail::is_checkpoint_node(const torch::autograd::Node& node) {
  return dynamic_cast<const torch::autograd::CppNode<CheckpointFunction>*>(&node) != nullptr;
}

at::Tensor checkpoint(const std::function<at::Tensor(const at::Tensor&)>& fn,
                      const at::Tensor& input,
                      const std::shared_ptr<ActivationCheckpointing>& context) {
  ZERO_CHECK(fn, UsageError, "zero::checkpoint: no function to run");
  ZERO_CHECK(input.defined(), UsageError, "zero::checkpoint: the input is an undefined tensor");
  if (!at::GradMode::is_enabled()) return fn(input);
  auto saved = c10::make_intrusive<SavedCheckpoint>();
  saved->fn = fn;
  saved->context = context ? context : ActivationCheckpointing::process_default();
  saved->device = input.device();
  saved->requires_grad = input.requires_grad();
  at::Tensor anchor = at::empty({0}, at::TensorOptions().dtype(at::kFloat));
  if (!input.requires_grad()) anchor.requires_grad_(true);
  return CheckpointFunction::apply(input, anchor, saved);
}

CheckpointedImpl::CheckpointedImpl(torch::nn::AnyModule inner) : inner_(std::move(inner)) {
  ZERO_CHECK(!inner_.is_empty(), UsageError, "zero::Checkpointed: no module to wrap");
  ZERO_CHECK(!std::dynamic_pointer_cast<CheckpointedImpl>(inner_.ptr()), UsageError,
             "zero::Checkpointed: this block is already checkpointed; wrap it once");
  register_module("inner", inner_.ptr());
}

at::Tensor CheckpointedImpl::forward(const at::Tensor& input) {
  torch::nn::AnyModule inner = inner_;
  return checkpoint([inner](const at::Tensor& x) mutable { return inner.forward(x); }, input,
                    context_);
}

}  // namespace zero
