// zero::Checkpointed and zero::checkpoint without an engine: the example GPT with dropout gives
// bitwise the gradients (and random stream) of the run without checkpoints, in fp32 and bf16;
// the counters, the function form, evaluation mode and misuse.
#include <zero/engine/activation/checkpointed.h>
#include <zero/error.h>

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "data.h"
#include "model.h"

namespace {

gpt::GptConfig small_gpt() {
  gpt::GptConfig g;
  g.vocab_size = 40;
  g.context = 16;
  g.n_layer = 3;
  g.n_head = 4;
  g.d_model = 32;
  g.dropout = 0.2;
  return g;
}

struct Result {
  std::vector<torch::Tensor> grads;
  double loss = 0;
  double next_random = 0;  // the global stream after backward
};

// One forward/backward of the GPT; `wrap` puts each block in a checkpoint (or not).
Result run(torch::Dtype dtype, const std::shared_ptr<zero::ActivationCheckpointing>& context,
           bool checkpointed) {
  torch::manual_seed(11);
  gpt::Gpt model(small_gpt());
  model->to(dtype);
  if (checkpointed)
    model->wrap_blocks([&](torch::nn::AnyModule block) {
      zero::Checkpointed c(block);
      c->attach(context);
      return torch::nn::AnyModule(c);
    });
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(0, 40, {2, 16});
  const torch::Tensor targets = torch::randint(0, 40, {2, 16});
  torch::Tensor loss = model->loss(tokens, targets);
  loss.backward();
  Result r;
  r.loss = loss.item<double>();
  for (const auto& p : model->parameters()) r.grads.push_back(p.grad().clone());
  r.next_random = torch::rand({1}).item<double>();
  return r;
}

void require_bitwise(const Result& a, const Result& b) {
  REQUIRE(a.loss == b.loss);
  REQUIRE(a.next_random == b.next_random);
  REQUIRE(a.grads.size() == b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) REQUIRE(torch::equal(a.grads[i], b.grads[i]));
}

}  // namespace

TEST_CASE("checkpointed blocks give bitwise the gradients of the plain model, with dropout") {
  for (torch::Dtype dtype : {torch::kFloat, torch::kBFloat16}) {
    auto context = std::make_shared<zero::ActivationCheckpointing>();
    const Result plain = run(dtype, nullptr, false);
    const Result ckpt = run(dtype, context, true);
    require_bitwise(plain, ckpt);
    const zero::ActivationCheckpointStats s = context->stats();
    CHECK(s.checkpoints == 3);
    CHECK(s.recomputes == 3);
    CHECK(s.live_bytes == 0);
    // Each block keeps its input [2, 16, 32] and nothing else.
    CHECK(s.peak_live_bytes == 3 * 2 * 16 * 32 * static_cast<int64_t>(torch::elementSize(dtype)));

    zero::ActivationCheckpointingConfig cpu;
    cpu.cpu_checkpointing = true;  // on the CPU the input already is in host memory
    cpu.profile = true;
    auto cpu_context = std::make_shared<zero::ActivationCheckpointing>(cpu);
    require_bitwise(plain, run(dtype, cpu_context, true));
    CHECK(cpu_context->stats().moved_bytes == 0);
    CHECK(cpu_context->stats().recompute_seconds > 0);
  }
}

TEST_CASE("a dropped graph returns its checkpoints' bytes; evaluation keeps nothing") {
  auto context = std::make_shared<zero::ActivationCheckpointing>();
  torch::nn::Linear lin(8, 8);
  zero::Checkpointed block(lin);
  block->attach(context);
  const torch::Tensor x = torch::randn({4, 8}, torch::requires_grad());
  { torch::Tensor y = block->forward(x); }
  CHECK(context->stats().checkpoints == 1);
  CHECK(context->stats().live_bytes == 0);
  {
    torch::NoGradGuard no_grad;
    torch::Tensor y = block->forward(x);
    CHECK(!y.requires_grad());
  }
  CHECK(context->stats().checkpoints == 1);
}

TEST_CASE("zero::checkpoint: parameters get gradients when the input needs none") {
  torch::manual_seed(1);
  torch::nn::Linear lin(8, 8);
  const torch::Tensor x = torch::randn({4, 8});  // no grad wanted for the input
  auto fn = [&](const torch::Tensor& in) { return torch::tanh(lin->forward(in)); };
  fn(x).sum().backward();
  const torch::Tensor plain = lin->weight.grad().clone();
  lin->zero_grad();
  zero::checkpoint(fn, x).sum().backward();
  CHECK(torch::equal(plain, lin->weight.grad()));
}

TEST_CASE("zero::checkpoint: an input changed in place before backward is an error") {
  torch::nn::Linear lin(8, 8);
  torch::Tensor x = torch::randn({4, 8}).requires_grad_();
  torch::Tensor h = x * 2;
  torch::Tensor y = zero::checkpoint([&](const torch::Tensor& in) { return lin->forward(in); }, h);
  h.add_(1);
  CHECK_THROWS_AS(y.sum().backward(), zero::UsageError);
}
