// The GPT's pipeline layers (pipeline.h).
#include "pipeline.h"

#include <zero/engine/activation/checkpointed.h>

#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>
#include <torch/nn/modules/normalization.h>

namespace gpt {

namespace F = torch::nn::functional;

EmbeddingImpl::EmbeddingImpl(const GptConfig& c) : config_(c) {
  wte_ = register_module("wte", torch::nn::Embedding(c.vocab_size, c.d_model));
  wpe_ = register_module("wpe", torch::nn::Embedding(c.context, c.d_model));
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(wte_->weight, 0.0, 0.02);
  torch::nn::init::normal_(wpe_->weight, 0.0, 0.02);
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= config_.context, "sequence of ", T, " tokens is longer than the context ",
              config_.context);
  const at::Tensor positions = at::arange(T, tokens.options().dtype(at::kLong));
  return dropout(wte_->forward(tokens) + wpe_->forward(positions), config_.dropout, *this);
}

std::vector<zero::pipe::LayerSpec> pipeline_layers(const GptConfig& c,
                                                   bool checkpoint_activations) {
  auto embedding = [c] { return torch::nn::AnyModule(Embedding(c)); };
  std::vector<zero::pipe::LayerSpec> layers;
  layers.push_back(zero::pipe::TiedLayerSpec("embedding", "Embedding", embedding));
  for (int64_t i = 0; i < c.n_layer; ++i)
    layers.emplace_back("Block", [c, checkpoint_activations] {
      torch::nn::AnyModule block{Block(c)};
      return checkpoint_activations ? torch::nn::AnyModule(zero::Checkpointed(block)) : block;
    });
  layers.emplace_back("LayerNorm", [c] {
    return torch::nn::AnyModule(torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  });
  layers.push_back(zero::pipe::TiedLayerSpec(
      "embedding", "Head", embedding, [](torch::nn::AnyModule& m, const torch::Tensor& x) {
        return at::matmul(x, m.get<Embedding>()->token_weight().t());
      }));
  return layers;
}

torch::Tensor pipeline_loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  // In fp32 also when the model runs in fp16/bf16, as Gpt::loss.
  const at::Tensor l = logits.to(at::kFloat);
  return F::cross_entropy(l.view({-1, l.size(-1)}), targets.reshape({-1}));
}

}  // namespace gpt
