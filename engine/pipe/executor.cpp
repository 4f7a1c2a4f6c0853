// Engine::train_batch: a pipeline stage runs its instruction list (schedule.h) for one batch:
// micro-batches loaded on the first and last stages, activations and gradients exchanged with the
// neighbours, each micro-batch's backward between the stage's start_backward / finish_backward
// (the last one the accumulation boundary, where ZeRO reduces), then one optimizer step.
#include "engine_impl.h"

#include <zero/engine/pipe/module.h>
#include <zero/engine/pipe/p2p.h>
#include <zero/engine/pipe/schedule.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/autograd.h>

#include <map>

namespace zero {

double Engine::train_batch(const std::function<pipe::MicroBatch()>& next_micro_batch) {
  Impl& s = *impl_;
  ZERO_CHECK(s.pipeline, UsageError,
             "train_batch: the model is not a zero::pipe::PipelineModule on a grid with "
             "pipeline stages; use backward() and step()");
  pipe::PipelineModuleImpl& module = *s.pipeline;
  const pipe::PipelineOptions::LossFn& loss_fn = module.options().loss_fn();
  ZERO_CHECK(!module.is_last_stage() || loss_fn, UsageError,
             "train_batch: PipelineOptions::loss_fn is not set (the last stage computes the "
             "loss)");
  const int stage = module.stage(),
            micro_batches = static_cast<int>(s.config.gradient_accumulation_steps);
  const at::Device device = s.params[0].device();
  auto what = [&](const char* kind, int micro) {
    return detail::str(kind, " of micro-batch ", micro, " (stage ", stage, ")");
  };

  std::map<int, at::Tensor> inputs, outputs, labels, grads_in, grads_out;
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
  for (const pipe::Instruction& in :
       pipe::build_schedule(pipe::ScheduleKind::kOneFOneB, s.pipeline_size, micro_batches, stage)) {
    const int micro = in.micro;
    switch (in.op) {
      case pipe::Instruction::Op::kLoad: {
        pipe::MicroBatch batch = next_micro_batch();
        if (module.is_first_stage()) inputs[micro] = batch.inputs.to(device);
        if (module.is_last_stage()) labels[micro] = batch.labels.to(device);
        break;
      }
      case pipe::Instruction::Op::kComm: {
        std::vector<pipe::Outgoing> sends;
        std::vector<pipe::Incoming> receives;
        for (const pipe::Transfer& t : in.transfers) {
          const bool act = t.what == pipe::Transfer::What::kActivation;
          if (t.kind == pipe::Transfer::Kind::kSend) {
            at::Tensor& sent = act ? outputs.at(t.micro) : grads_out.at(t.micro);
            sends.push_back(
                {t.peer, {sent.detach()}, what(act ? "activation" : "gradient", t.micro)});
            if (!act) grads_out.erase(t.micro);
          } else {
            receives.push_back({t.peer, what(act ? "activation" : "gradient", t.micro)});
          }
        }
        const auto got = pipe::exchange(*s.pipe_group, sends, receives, device);
        size_t k = 0;
        for (const pipe::Transfer& t : in.transfers) {
          if (t.kind != pipe::Transfer::Kind::kRecv) continue;
          ZERO_CHECK(got[k].size() == 1, UsageError, "train_batch: ", receives[k].what,
                     " arrived as ", got[k].size(), " tensors; stages exchange one");
          at::Tensor value = got[k++][0];
          if (t.what == pipe::Transfer::What::kActivation) {
            if (at::isFloatingType(value.scalar_type())) value.requires_grad_(true);
            inputs[t.micro] = value;
          } else {
            grads_in[t.micro] = value;
          }
        }
        break;
      }
      case pipe::Instruction::Op::kForward: {
        at::Tensor out = module.forward(inputs.at(micro));
        if (module.is_last_stage()) {
          out = loss_fn(out, labels.at(micro));
          ZERO_CHECK(out.numel() == 1, UsageError, "train_batch: the loss of micro-batch ", micro,
                     " has ", out.numel(), " elements; loss_fn must return a scalar");
          loss_sum += out.item<double>();
          labels.erase(micro);
        }
        outputs[micro] = out;
        break;
      }
      case pipe::Instruction::Op::kBackward: {
        const bool boundary = ++backwards == micro_batches;
        s.stage->start_backward(boundary);
        at::Tensor out = outputs.at(micro);
        if (module.is_last_stage()) {
          // DeepSpeed's order: loss / gradient_accumulation_steps, then (fp16) x scale.
          at::Tensor scaled = micro_batches > 1 ? out / static_cast<double>(micro_batches) : out;
          if (s.scaler) scaled = scaled.to(at::kFloat) * s.scaler->scale();
          scaled.backward();
        } else {
          torch::autograd::backward({out}, {grads_in.at(micro)});
          grads_in.erase(micro);
        }
        s.stage->finish_backward();
        if (!module.is_first_stage()) {
          const at::Tensor& x = inputs.at(micro);
          ZERO_CHECK(x.grad().defined(), UsageError, "train_batch: the input of stage ", stage,
                     " got no gradient in micro-batch ", micro,
                     " (its layers do not use it in a differentiable way)");
          grads_out[micro] = x.grad();
        }
        inputs.erase(micro);
        outputs.erase(micro);
        break;
      }
      case pipe::Instruction::Op::kStep:
        batch_loss = average_loss();
        if (s.comm->rank() == 0)  // the progress line's and monitors' loss
          s.window_loss = at::full({}, batch_loss, at::TensorOptions().dtype(at::kDouble));
        s.micro_steps += micro_batches;
        s.optimizer_step();
        s.after_optimizer_step();
        break;
      default:  // kReduceTied (no tied layers yet), kReduce (at the boundary's finish_backward)
        break;
    }
  }
  return batch_loss;
}

}  // namespace zero

namespace zero::detail {

void refuse_pipeline(const Engine::Impl& s, const std::string& what) {
  ZERO_CHECK(!s.pipeline, UsageError, what, ": not yet with pipeline stages (", s.pipeline_size,
             " stages): each stage would write or read only its own layers");
}

}  // namespace zero::detail
