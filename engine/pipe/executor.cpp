// Engine::train_batch and eval_batch: a pipeline stage runs its instruction list (schedule.h) for
// one batch: micro-batches loaded on the first and last stages, activations and gradients
// exchanged with the neighbours, each micro-batch's backward between the stage's start_backward /
// finish_backward (the last one the accumulation boundary, where ZeRO reduces), then one
// optimizer step; eval_batch runs the forward part of that list, without a graph.
#include "engine_impl.h"
#include "pipe/split_backward.h"

#include <zero/engine/pipe/module.h>
#include <zero/engine/pipe/p2p.h>
#include <zero/engine/pipe/schedule.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <map>
#include <optional>

namespace zero {

double Engine::train_batch(const std::function<pipe::MicroBatch()>& next_micro_batch) {
  const double loss = impl_->run_pipeline(impl_->pipe_program, next_micro_batch, /*train=*/true);
  save_if_due();
  return loss;
}

double Engine::eval_batch(const std::function<pipe::MicroBatch()>& next_micro_batch) {
  return impl_->run_pipeline(impl_->pipe_eval_program, next_micro_batch, /*train=*/false);
}

double Engine::Impl::run_pipeline(const std::vector<pipe::Instruction>& program,
                                  const std::function<pipe::MicroBatch()>& next_micro_batch,
                                  bool train) {
  Impl& s = *this;
  const char* call = train ? "train_batch" : "eval_batch";
  ZERO_CHECK(s.pipeline, UsageError, call,
             ": the model is not a zero::pipe::PipelineModule on a grid with pipeline stages; use "
             "the model's forward",
             train ? " and backward() and step()" : "");
  pipe::PipelineModuleImpl& module = *s.pipeline;
  const pipe::PipelineOptions::LossFn& loss_fn = module.options().loss_fn();
  ZERO_CHECK(!module.is_last_stage() || loss_fn, UsageError, call,
             ": PipelineOptions::loss_fn is not set (the last stage computes the loss)");
  // Evaluation records no graph; its time stays out of the training step's breakdown.
  std::optional<torch::NoGradGuard> no_grad;
  if (!train) no_grad.emplace();
  StepTimers* timers = train ? &s.timers : nullptr;
  const int stage = module.stage(), chunks = module.virtual_stages(),
            micro_batches = static_cast<int>(s.config.gradient_accumulation_steps);
  const at::Device device = s.params[0].device();
  auto what = [&](const char* kind, int micro, int chunk) {
    return chunks > 1 ? detail::str(kind, " of micro-batch ", micro, " (stage ", stage, ", chunk ",
                                    chunk, ")")
                      : detail::str(kind, " of micro-batch ", micro, " (stage ", stage, ")");
  };

  // Per (micro-batch, model chunk): a chunk's input (a leaf to take its gradient) and output,
  // the gradient received for the output and the one to send for the input.
  using Slot = std::pair<int, int>;
  std::map<Slot, at::Tensor> inputs, outputs, grads_in, grads_out;
  std::map<int, at::Tensor> labels;
  double loss_sum = 0, batch_loss = 0;
  int backwards = 0;
  // The last stage's mean over the micro-batches, averaged over its data group, then sent to
  // every stage.
  auto average_loss = [&] {
    at::Tensor loss = at::full({1}, module.is_last_stage() ? loss_sum / micro_batches : 0.0,
                               at::TensorOptions().dtype(at::kFloat).device(device));
    if (module.is_last_stage() && s.data->world_size() > 1)
      s.data->all_reduce(loss, ReduceOp::kAvg)->wait();
    s.pipe_group->broadcast(loss, s.pipeline_size - 1)->wait();
    return loss.item<double>();
  };
  // zb-h1: each micro-batch's backward between its input pass and its weight pass.
  std::map<Slot, pipe::SplitBackward> splits;
  // Sends posted without waiting (zb-h1); the communicator runs them before any later step.
  std::vector<pipe::PendingSends> behind;
  auto wait_behind = [&] {
    for (pipe::PendingSends& p : behind) p.wait();
    behind.clear();
  };
  // Where a backward of `slot` starts: the last part's loss / gradient_accumulation_steps, then
  // (fp16) x scale, as DeepSpeed orders it, with gradient 1; else the output with the gradient
  // the next stage sent.
  auto root_of = [&](const Slot& slot) -> std::pair<at::Tensor, at::Tensor> {
    const at::Tensor& out = outputs.at(slot);
    if (!module.is_last_part(slot.second)) return {out, grads_in.at(slot)};
    at::Tensor scaled = micro_batches > 1 ? out / static_cast<double>(micro_batches) : out;
    if (s.scaler) scaled = scaled.to(at::kFloat) * s.scaler->scale();
    return {scaled, at::ones_like(scaled)};
  };
  // The gradient a stage sends back for its input, which its layers must have produced.
  auto input_grad = [&](const Slot& slot, const at::Tensor& grad) {
    ZERO_CHECK(grad.defined(), UsageError, "train_batch: the input of stage ", stage,
               chunks > 1 ? detail::str(" chunk ", slot.second) : std::string(),
               " got no gradient in micro-batch ", slot.first,
               " (its layers do not use it in a differentiable way)");
    return grad;
  };
  // With tensor parallelism, activations (gradients) cross stages as 1/tp slices each tensor rank
  // sends, all-gathered by the receiving stage (pipe_partitioned, grad_partitioned); the first
  // batch checks that the tensor ranks' tensors are equal, as slicing assumes.
  auto sliced = [&](bool activation) {
    return s.tensor_size > 1 &&
           (activation ? s.config.pipe_partitioned : s.config.grad_partitioned);
  };
  if (train) s.timers.enter();  // the time since the last engine call is the program's (fwd)
  // Stage 3: this stage's layers gathered once for the batch, released before the step.
  s.stage->hold_gathered(true);
  for (const pipe::Instruction& in : program) {
    const Slot slot{in.micro, in.chunk};
    switch (in.op) {
      case pipe::Instruction::Op::kLoad: {
        pipe::MicroBatch batch = next_micro_batch();
        if (module.is_first_part(in.chunk)) inputs[slot] = batch.inputs.to(device);
        if (module.is_last_part(in.chunk)) labels[in.micro] = batch.labels.to(device);
        break;
      }
      case pipe::Instruction::Op::kComm: {
        std::vector<pipe::Outgoing> sends;
        std::vector<pipe::Incoming> receives;
        for (const pipe::Transfer& t : in.transfers) {
          const bool act = t.what == pipe::Transfer::What::kActivation;
          const char* kind = act ? "activation" : "gradient";
          if (t.kind == pipe::Transfer::Kind::kSend) {
            // A transfer names the receiver's chunk: the last stage's chunk c feeds the first
            // stage's chunk c + 1, whose gradient comes back to chunk c.
            int chunk = t.chunk;
            if (act && module.is_last_stage()) --chunk;
            if (!act && module.is_first_stage()) ++chunk;
            auto& from = act ? outputs : grads_out;
            auto it = from.find({t.micro, chunk});
            ZERO_ASSERT(it != from.end(), "no ", kind, " of micro-batch ", t.micro, " chunk ",
                        chunk, " to send");
            const std::string message = what(kind, t.micro, chunk);
            if (sliced(act)) {
              const char* key = act ? "pipe_partitioned" : "grad_partitioned";
              if (!s.pipe_slices_checked)
                pipe::check_replicated(*s.tensor, it->second, message, key);
              sends.push_back(
                  {t.peer,
                   pipe::scatter_for_stage(it->second.detach(), s.tensor_rank, s.tensor_size),
                   message});
            } else {
              sends.push_back({t.peer, {it->second.detach()}, message});
            }
            if (!act) from.erase(it);
          } else {
            receives.push_back({t.peer, what(kind, t.micro, t.chunk)});
          }
        }
        if (!in.wait) {  // sends only, behind the compute that follows
          ZERO_ASSERT(receives.empty(), "a comm step not waited for receives");
          behind.push_back(pipe::post_sends(*s.pipe_group, sends, device));
          break;
        }
        std::vector<std::vector<at::Tensor>> got;
        {
          ScopedPart wait(timers, TimerPart::kPipeWait);
          got = pipe::exchange(*s.pipe_group, sends, receives, device);
          wait_behind();  // ran before this step: done
        }
        size_t k = 0;
        for (const pipe::Transfer& t : in.transfers) {
          if (t.kind != pipe::Transfer::Kind::kRecv) continue;
          const bool act = t.what == pipe::Transfer::What::kActivation;
          at::Tensor value;
          if (sliced(act)) {
            value = pipe::gather_from_stage(*s.tensor, got[k], receives[k].what);
          } else {
            ZERO_CHECK(got[k].size() == 1, UsageError, call, ": ", receives[k].what, " arrived as ",
                       got[k].size(), " tensors; stages exchange one");
            value = got[k][0];
          }
          ++k;
          if (act) {
            if (at::isFloatingType(value.scalar_type())) value.requires_grad_(true);
            inputs[{t.micro, t.chunk}] = value;
          } else {
            grads_in[{t.micro, t.chunk}] = value;
          }
        }
        break;
      }
      case pipe::Instruction::Op::kForward: {
        at::Tensor out = module.forward(inputs.at(slot), in.chunk);
        if (module.is_last_part(in.chunk)) {
          out = loss_fn(out, labels.at(in.micro));
          ZERO_CHECK(out.numel() == 1, UsageError, call, ": the loss of micro-batch ", in.micro,
                     " has ", out.numel(), " elements; loss_fn must return a scalar");
          loss_sum += out.item<double>();
          labels.erase(in.micro);
        }
        outputs[slot] = out;
        break;
      }
      case pipe::Instruction::Op::kBackward: {
        // Every chunk's gradients accumulate over the batch; ZeRO reduces them after the last.
        s.stage->start_backward(++backwards == micro_batches * chunks);
        const auto [root, seed] = root_of(slot);
        torch::autograd::backward({root}, {seed});
        grads_in.erase(slot);
        s.stage->finish_backward();
        if (!module.is_first_part(in.chunk))
          grads_out[slot] = input_grad(slot, inputs.at(slot).grad());
        inputs.erase(slot);
        outputs.erase(slot);
        break;
      }
      case pipe::Instruction::Op::kBackwardInput: {
        // zb-h1's B: only the input's gradient (what the previous stage waits for), the graph
        // kept for the weight pass; no parameter gradient is accumulated.
        const auto [root, seed] = root_of(slot);
        grads_in.erase(slot);
        const at::Tensor x = module.is_first_part(in.chunk) ? at::Tensor() : inputs.at(slot);
        at::Tensor grad;
        try {
          grad = splits[slot].input_pass(root, seed, x);
        } catch (const UsageError& e) {
          throw UsageError(detail::str("train_batch: the zb-h1 schedule's ",
                                       what("input-gradient pass", in.micro, in.chunk),
                                       " failed (activation checkpointing cannot run it; use "
                                       "1f1b or interleaved): ",
                                       e.what()));
        }
        if (!module.is_first_part(in.chunk)) grads_out[slot] = input_grad(slot, grad);
        break;
      }
      case pipe::Instruction::Op::kBackwardWeight: {
        // zb-h1's W: the parameters' gradients from what B kept (split_backward.h).
        s.stage->start_backward(++backwards == micro_batches * chunks);
        splits.at(slot).weight_pass();
        s.stage->finish_backward();
        splits.erase(slot);
        inputs.erase(slot);
        outputs.erase(slot);
        break;
      }
      case pipe::Instruction::Op::kStep:
        s.pipe_slices_checked = true;
        s.stage->hold_gathered(false);
        batch_loss = average_loss();
        if (s.comm->rank() == 0)  // the progress line's and monitors' loss
          s.window_loss = at::full({}, batch_loss, at::TensorOptions().dtype(at::kDouble));
        s.micro_steps += micro_batches;
        s.timers.leave(TimerPart::kPipeSchedule);
        s.timers.enter();
        s.optimizer_step();
        s.timers.leave(TimerPart::kStep);
        s.after_optimizer_step();
        break;
      case pipe::Instruction::Op::kReduceTied: {
        {
          ScopedPart wait(timers, TimerPart::kPipeWait);
          wait_behind();
        }
        // A tied module's copies sum their gradients over the stages that hold them, before the
        // data-parallel reduction (a sum commutes with the data average).
        for (const Impl::Tie& tie : s.ties)
          for (int p : tie.params) {
            at::Tensor grad = s.stage->accumulated_grad(p);
            ZERO_ASSERT(grad.defined(), "no accumulated gradient of tied ", s.names[p]);
            tie.group->all_reduce(grad, ReduceOp::kSum)->wait();
          }
        break;
      }
      case pipe::Instruction::Op::kReduce:
        s.stage->reduce_deferred();
        break;
      default:
        break;
    }
  }
  if (!train) {
    wait_behind();  // zb-h1's last sends (train_batch waits for them before reducing)
    s.stage->hold_gathered(false);
    batch_loss = average_loss();
  }
  return batch_loss;
}

}  // namespace zero
