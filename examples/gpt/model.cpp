// The GPT of model.h. Initialization follows GPT-2 (normal 0.02, residual projections scaled
// by 1/sqrt(2 * n_layer)); the head reuses the token embedding matrix (weight tying).
#include "model.h"

#include <cmath>
#include <unordered_set>

#include <ATen/ATen.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/init.h>

#include <zero/tp/mappings.h>
#include <zero/tp/random.h>

namespace gpt {

namespace F = torch::nn::functional;

namespace {
void init_linear(torch::nn::Linear& linear, double std) {
  torch::NoGradGuard no_grad;
  torch::nn::init::normal_(linear->weight, 0.0, std);
  if (linear->bias.defined()) torch::nn::init::zeros_(linear->bias);
}
// The same for a split layer: the normal draws are made over the whole weight (init_from_whole),
// so each rank keeps the values the unsplit layer would have.
template <class Layer>
void init_split_linear(Layer& layer, double std) {
  torch::NoGradGuard no_grad;
  for (const zero::tp::SplitParameter& s : layer->split_parameters())
    if (s.tensor.is_same(layer->weight))
      zero::tp::init_from_whole(s, *layer->tensor_group(),
                                [std](at::Tensor& w) { w.normal_(0.0, std); });
  if (layer->bias.defined()) layer->bias.zero_();
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c)
    : n_head_(c.n_head / c.tensor_size()),
      dropout_(c.dropout),
      split_sequence_(c.split_sequence()) {
  TORCH_CHECK(c.d_model % c.n_head == 0, "d_model ", c.d_model, " is not a multiple of n_head ",
              c.n_head);
  TORCH_CHECK(c.n_head % c.tensor_size() == 0, "n_head ", c.n_head,
              " is not divisible by the tensor-parallel size ", c.tensor_size());
  const double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  if (c.tensor_size() > 1) {
    using namespace zero::tp;
    const bool sp = c.split_sequence();
    qkv_tp_ = register_module(
        "qkv", ColumnParallelLinear(ColumnParallelLinearOptions(c.d_model, 3 * c.d_model)
                                        .stride(3)
                                        .sequence_parallel(sp)
                                        .sequence_dim(1),
                                    c.tensor_group));
    proj_tp_ = register_module(
        "proj",
        RowParallelLinear(
            RowParallelLinearOptions(c.d_model, c.d_model).sequence_parallel(sp).sequence_dim(1),
            c.tensor_group));
    init_split_linear(qkv_tp_, 0.02);
    init_split_linear(proj_tp_, proj_std);
    return;
  }
  qkv_ = register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model));
  proj_ = register_module("proj", torch::nn::Linear(c.d_model, c.d_model));
  init_linear(qkv_, 0.02);
  init_linear(proj_, proj_std);
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  // With tensor parallelism this rank's heads: its q, k and v columns (C / T each).
  const at::Tensor fused = qkv_tp_ ? qkv_tp_->forward(x) : qkv_->forward(x);
  const int64_t B = fused.size(0), T = fused.size(1), C = fused.size(2) / 3, hs = C / n_head_;
  auto qkv = fused.split(C, /*dim=*/2);  // the whole sequence (sequence parallelism gathers it)
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head_, hs}).transpose(1, 2); };
  auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);  // [B, nh, T, hs]
  auto att = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hs)));
  auto causal = at::ones({T, T}, fused.options().dtype(at::kBool)).triu(1);
  att = F::softmax(att.masked_fill(causal, -INFINITY), F::SoftmaxFuncOptions(-1));
  // This rank's heads: with tensor parallelism each rank draws its own masks (the tracker).
  att = qkv_tp_ ? zero::tp::dropout(att, dropout_, is_training()) : dropout(att, dropout_, *this);
  auto y = at::matmul(att, v).transpose(1, 2).contiguous().view({B, T, C});
  return residual_dropout(proj_tp_ ? proj_tp_->forward(y) : proj_->forward(y), dropout_,
                          split_sequence_, *this);
}

BlockImpl::BlockImpl(const GptConfig& c)
    : dropout_(c.dropout), split_sequence_(c.split_sequence()) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  attn_ = register_module("attn", CausalSelfAttention(c));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  const double proj_std = 0.02 / std::sqrt(2.0 * c.n_layer);
  if (c.tensor_size() > 1) {
    using namespace zero::tp;
    const bool sp = c.split_sequence();
    fc_tp_ = register_module(
        "fc", ColumnParallelLinear(ColumnParallelLinearOptions(c.d_model, 4 * c.d_model)
                                       .sequence_parallel(sp)
                                       .sequence_dim(1),
                                   c.tensor_group));
    fc_proj_tp_ = register_module(
        "fc_proj", RowParallelLinear(RowParallelLinearOptions(4 * c.d_model, c.d_model)
                                         .sequence_parallel(sp)
                                         .sequence_dim(1),
                                     c.tensor_group));
    if (sp) {  // on this rank's part of the sequence: their gradients are summed over the group
      zero::tp::sum_gradients_over_tensor_group(*ln1_, c.tensor_group);
      zero::tp::sum_gradients_over_tensor_group(*ln2_, c.tensor_group);
    }
    init_split_linear(fc_tp_, 0.02);
    init_split_linear(fc_proj_tp_, proj_std);
    return;
  }
  fc_ = register_module("fc", torch::nn::Linear(c.d_model, 4 * c.d_model));
  fc_proj_ = register_module("fc_proj", torch::nn::Linear(4 * c.d_model, c.d_model));
  init_linear(fc_, 0.02);
  init_linear(fc_proj_, proj_std);
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  auto h = x + attn_->forward(ln1_->forward(x));
  const at::Tensor u = ln2_->forward(h);
  const at::Tensor mlp = fc_tp_ ? fc_proj_tp_->forward(F::gelu(fc_tp_->forward(u)))
                                : fc_proj_->forward(F::gelu(fc_->forward(u)));
  return h + residual_dropout(mlp, dropout_, split_sequence_, *this);
}

GptImpl::GptImpl(const GptConfig& c) : config_(c) {
  TORCH_CHECK(c.vocab_size > 0 && c.context > 0 && c.n_layer > 0, "bad GPT config");
  TORCH_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, "dropout ", c.dropout, " is not in [0, 1)");
  TORCH_CHECK(c.vocab_size % c.tensor_size() == 0, "the vocabulary (", c.vocab_size,
              " tokens) is not divisible by the tensor-parallel size ", c.tensor_size());
  if (c.tensor_size() > 1)
    wte_tp_ = register_module(
        "wte", zero::tp::VocabParallelEmbedding(c.vocab_size, c.d_model, c.tensor_group));
  else
    wte_ = register_module("wte", torch::nn::Embedding(c.vocab_size, c.d_model));
  wpe_ = register_module("wpe", torch::nn::Embedding(c.context, c.d_model));
  blocks_ = torch::nn::Sequential();
  for (int64_t i = 0; i < c.n_layer; ++i) blocks_->push_back(Block(c));
  blocks_ = register_module("blocks", blocks_);
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
  if (c.split_sequence()) zero::tp::sum_gradients_over_tensor_group(*ln_f_, c.tensor_group);
  torch::NoGradGuard no_grad;
  if (wte_tp_)
    zero::tp::init_from_whole(wte_tp_->split_parameters().at(0), *c.tensor_group,
                              [](at::Tensor& w) { w.normal_(0.0, 0.02); });
  else
    torch::nn::init::normal_(wte_->weight, 0.0, 0.02);
  torch::nn::init::normal_(wpe_->weight, 0.0, 0.02);
}

torch::Tensor GptImpl::local_logits(const torch::Tensor& tokens) {
  const int64_t T = tokens.size(1);
  TORCH_CHECK(T <= config_.context, "sequence of ", T, " tokens is longer than the context ",
              config_.context);
  auto positions = at::arange(T, tokens.options().dtype(at::kLong));
  const at::Tensor embedded = wte_tp_ ? wte_tp_->forward(tokens) : wte_->forward(tokens);
  at::Tensor x = embedded + wpe_->forward(positions);
  const bool sp = config_.split_sequence();
  if (sp) x = zero::tp::scatter_to_sequence_region(x, config_.tensor_group, 1);
  x = residual_dropout(x, config_.dropout, sp, *this);
  for (auto& block : *blocks_) x = block.forward(x);  // one call per block (see blocks())
  if (!wte_tp_) return at::matmul(ln_f_->forward(x), wte_->weight.t());  // tied head
  // The tied head on this rank's vocabulary rows: the input's gradient is summed over the group
  // (with sequence parallelism: the sequence all-gathered, its gradient reduce-scattered).
  const at::Tensor h = ln_f_->forward(x);
  return at::matmul(sp ? zero::tp::gather_from_sequence_region(h, config_.tensor_group, 1)
                       : zero::tp::copy_to_tensor_region(h, config_.tensor_group),
                    wte_tp_->weight.t());
}

torch::Tensor GptImpl::forward(const torch::Tensor& tokens) {
  const at::Tensor logits = local_logits(tokens);
  return wte_tp_ ? zero::tp::gather_from_tensor_region(logits, config_.tensor_group) : logits;
}

void GptImpl::wrap_blocks(const std::function<torch::nn::AnyModule(torch::nn::AnyModule)>& wrap) {
  torch::nn::Sequential wrapped;
  for (const auto& block : *blocks_) wrapped->push_back(wrap(block));
  blocks_ = replace_module("blocks", wrapped);
}

torch::Tensor GptImpl::loss(const torch::Tensor& tokens, const torch::Tensor& targets) {
  // The loss in fp32 also when the model runs in fp16/bf16 (a 16-bit log-softmax loses the
  // small differences training follows).
  auto logits = local_logits(tokens).to(at::kFloat);
  if (wte_tp_)  // the softmax over the vocabulary from the group's max and sum, never gathered
    return zero::tp::vocab_parallel_cross_entropy(logits, targets, config_.tensor_group).mean();
  return F::cross_entropy(logits.view({-1, logits.size(-1)}), targets.reshape({-1}));
}

torch::Tensor dropout(const torch::Tensor& x, double p, const torch::nn::Module& module) {
  if (p == 0.0 || !module.is_training()) return x;
  return F::dropout(x, F::DropoutFuncOptions().p(p).training(true));
}

torch::Tensor residual_dropout(const torch::Tensor& x, double p, bool split_sequence,
                               const torch::nn::Module& module) {
  return split_sequence ? zero::tp::dropout(x, p, module.is_training()) : dropout(x, p, module);
}

int64_t count_parameters(torch::nn::Module& module, bool vectors_only) {
  std::unordered_set<const void*> seen;
  int64_t total = 0;
  for (const auto& p : module.parameters())
    if (seen.insert(p.unsafeGetTensorImpl()).second && (!vectors_only || p.dim() <= 1))
      total += p.numel();
  return total;
}

}  // namespace gpt
