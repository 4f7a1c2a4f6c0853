// A small GPT in plain LibTorch: token embedding + learned positions, pre-norm transformer
// blocks (causal multi-head self-attention, GELU MLP), final LayerNorm, head tied to the embedding.
// With a tensor-parallel group of T ranks the matrices are split as Megatron splits them (QKV
// column-parallel with stride 3, so each rank runs n_head / T heads; the attention output and
// the MLP's second matrix row-parallel; the embedding and the tied head vocab-parallel, with the
// vocab-parallel cross entropy), and the values are those of the unsplit model under the same seed.
#pragma once

#include <cstdint>
#include <functional>

#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <zero/tp/layers.h>

namespace gpt {

struct GptConfig {
  int64_t vocab_size = 0;
  int64_t context = 64;  // longest sequence (positions learned)
  int64_t n_layer = 2;
  int64_t n_head = 4;
  int64_t d_model = 64;
  double dropout = 0.0;  // GPT-2's places: embeddings, attention weights, both residual branches
  // Tensor parallelism (null or one rank: none). n_head, d_model and vocab_size must divide by
  // its size.
  std::shared_ptr<zero::Communicator> tensor_group;
  int tensor_size() const { return tensor_group ? tensor_group->world_size() : 1; }
  // Megatron's sequence parallelism (with tensor_group): LayerNorms, dropout and the residual
  // stream hold 1/T of the sequence (which T must divide); the matrices all-gather it and
  // reduce-scatter their outputs instead of all-reducing them.
  bool sequence_parallel = false;
  bool split_sequence() const { return sequence_parallel && tensor_size() > 1; }
};

class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);  // [B, T, C] -> [B, T, C]

 private:
  int64_t n_head_;  // on this rank
  double dropout_;
  bool split_sequence_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  zero::tp::ColumnParallelLinear qkv_tp_{nullptr};
  zero::tp::RowParallelLinear proj_tp_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// x + attn(ln1(x)), then + mlp(ln2(x)): the unit that ZeRO stage 3 gathers and releases.
class BlockImpl : public torch::nn::Module {
 public:
  explicit BlockImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, fc_proj_{nullptr};
  zero::tp::ColumnParallelLinear fc_tp_{nullptr};
  zero::tp::RowParallelLinear fc_proj_tp_{nullptr};
  double dropout_;
  bool split_sequence_;
};
TORCH_MODULE(Block);

class GptImpl : public torch::nn::Module {
 public:
  explicit GptImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& tokens);  // int64 [B, T] -> logits [B, T, vocab]
  // With tensor parallelism: this rank's vocabulary columns [B, T, vocab / T] (else forward).
  torch::Tensor local_logits(const torch::Tensor& tokens);
  // Mean cross-entropy of predicting targets [B, T] from tokens [B, T].
  torch::Tensor loss(const torch::Tensor& tokens, const torch::Tensor& targets);

  const GptConfig& config() const { return config_; }
  // The transformer blocks, in order; forward() runs each element of this container once.
  torch::nn::Sequential& blocks() { return blocks_; }
  // Replaces every block by wrap(block), e.g. a zero::Sharded around it for ZeRO stage 3.
  void wrap_blocks(const std::function<torch::nn::AnyModule(torch::nn::AnyModule)>& wrap);

 private:
  GptConfig config_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  zero::tp::VocabParallelEmbedding wte_tp_{nullptr};
  torch::nn::Sequential blocks_{nullptr};
  torch::nn::LayerNorm ln_f_{nullptr};
};
TORCH_MODULE(Gpt);

// Shared tensors counted once; vectors_only: those of at most one dimension (biases, norms).
int64_t count_parameters(torch::nn::Module& module, bool vectors_only = false);

// Dropout with probability p while `module` trains; the identity (no random draw) when p is 0.
torch::Tensor dropout(const torch::Tensor& x, double p, const torch::nn::Module& module);
// Dropout of the residual stream: with sequence parallelism each rank holds other positions, so
// it draws its own mask (the model-parallel RNG tracker); else as dropout() above.
torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool split_sequence,
                               const torch::nn::Module& module);

}  // namespace gpt
