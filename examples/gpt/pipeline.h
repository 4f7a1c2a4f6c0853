// The GPT as pipeline layers (gpt_train --pp): the embedding (tokens and positions), the blocks,
// the final LayerNorm and the head, which reads the embedding's weight (a TiedLayerSpec: the
// first and the last stage each hold the embedding and sum its gradients). Each layer is built
// after its own seed, so the model does not depend on the number of stages; its values are not
// those of gpt::Gpt, which draws them in another order.
#pragma once

#include "model.h"

#include <zero/engine/pipe/module.h>

#include <vector>

namespace gpt {

class EmbeddingImpl : public torch::nn::Module {
 public:
  explicit EmbeddingImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens);  // int64 [B, T] -> [B, T, C]
  const torch::Tensor& token_weight() const { return wte_->weight; }

 private:
  GptConfig config_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
};
TORCH_MODULE(Embedding);

// `checkpoint_activations`: each block inside zero::Checkpointed.
std::vector<zero::pipe::LayerSpec> pipeline_layers(const GptConfig& config,
                                                   bool checkpoint_activations);
// The mean cross entropy of logits [B, T, vocab] against targets [B, T], in fp32.
torch::Tensor pipeline_loss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace gpt
