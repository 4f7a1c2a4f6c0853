// The model and data of the engine tests: awkward parameter sizes (a 127x24 input layer larger
// than a shard, a 1-element bias, sizes not divisible by the world size) and two wrapped blocks.
#pragma once

#include <zero/engine/sharded.h>

#include <torch/torch.h>

namespace zero::test {

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  BlockImpl(int width, int hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(width, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, width));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + fc2(torch::tanh(fc1(x))); }
};
TORCH_MODULE(Block);

constexpr int kIn = 127, kWidth = 24, kHidden = 40;

// input Linear(127, 24) -> tanh -> blocks (each optionally wrapped in zero::Sharded; with
// `reuse_first`, blocks[0] runs once more after the last) -> head Linear(24, 1) (1-element
// bias). All parameters derive from `seed`.
struct NetImpl : torch::nn::Module {
  torch::nn::Linear input{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks;
  bool reuse_first = false;
  NetImpl(int64_t seed, int num_blocks = 2, bool wrap = true, bool reuse_first_block = false)
      : reuse_first(reuse_first_block) {
    torch::manual_seed(seed);
    input = register_module("input", torch::nn::Linear(kIn, kWidth));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < num_blocks; ++i) {
      Block b(kWidth, kHidden);
      if (wrap)
        blocks->push_back(zero::Sharded(b));
      else
        blocks->push_back(b);
    }
    head = register_module("head", torch::nn::Linear(kWidth, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::tanh(input(x));
    auto run = [](const std::shared_ptr<torch::nn::Module>& b, const torch::Tensor& in) {
      if (auto s = b->as<zero::ShardedImpl>()) return s->forward(in);
      return b->as<BlockImpl>()->forward(in);
    };
    for (auto& b : *blocks) h = run(b, h);
    if (reuse_first && !blocks->is_empty()) h = run(blocks[0], h);
    return head(h).squeeze(-1);
  }
};
TORCH_MODULE(Net);

// Linear in fp32 whatever the parameters' dtype: LibTorch 1.13's CPU kernels have no fp16
// matmul, so fp16 models on the CPU cast their weights (their gradients stay fp16).
inline torch::Tensor cast_linear(const torch::nn::Linear& l, const torch::Tensor& x) {
  return torch::nn::functional::linear(x.to(torch::kFloat), l->weight.to(torch::kFloat),
                                       l->bias.to(torch::kFloat));
}

struct CastBlockImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  CastBlockImpl(int width, int hidden) {
    fc1 = register_module("fc1", torch::nn::Linear(width, hidden));
    fc2 = register_module("fc2", torch::nn::Linear(hidden, width));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return x + cast_linear(fc2, torch::tanh(cast_linear(fc1, x)));
  }
};
TORCH_MODULE(CastBlock);

// Net's shape (input, two wrapped blocks, head) computing in fp32 from parameters of any dtype.
struct CastNetImpl : torch::nn::Module {
  torch::nn::Linear input{nullptr}, head{nullptr};
  torch::nn::ModuleList blocks;
  explicit CastNetImpl(int64_t seed) {
    torch::manual_seed(seed);
    input = register_module("input", torch::nn::Linear(kIn, kWidth));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 2; ++i) blocks->push_back(zero::Sharded(CastBlock(kWidth, kHidden)));
    head = register_module("head", torch::nn::Linear(kWidth, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = torch::tanh(cast_linear(input, x));
    for (auto& b : *blocks) h = b->as<zero::ShardedImpl>()->forward(h);
    return cast_linear(head, h).squeeze(-1);
  }
};
TORCH_MODULE(CastNet);

// `registered` without the `.inner.` segments zero::Sharded adds: the test nets' only `inner`
// children are the wrappers', so this is the name in the net built without wrappers. Spelled out
// here rather than taken from zero::CleanNames, so that tests check that against it.
inline std::string without_inner(std::string registered) {
  for (size_t at = registered.find(".inner."); at != std::string::npos;
       at = registered.find(".inner."))
    registered.erase(at, 6);
  return registered;
}

// Sample i of the data set of `seed`: deterministic, independent of how it is split.
inline std::pair<torch::Tensor, torch::Tensor> samples(int64_t seed, int64_t first, int64_t count) {
  torch::Tensor x = torch::empty({count, kIn}), y = torch::empty({count});
  for (int64_t i = 0; i < count; ++i) {
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(seed * 1000003 + first + i));
    x[i] = at::randn({kIn}, gen);
    y[i] = at::randn({1}, gen)[0];
  }
  return {x, y};
}

}  // namespace zero::test
