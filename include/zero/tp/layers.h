// Megatron's tensor-parallel layers over a tensor-parallel group of T ranks:
//   ColumnParallelLinear   Y_r = X A_r        (A split by output columns; optional all-gather)
//   RowParallelLinear      Y = sum_r X_r A_r  (A split by input rows; one all-reduce, then bias)
//   VocabParallelEmbedding each rank holds vocab / T rows; lookups outside them are zero, summed
// Each rank initialises the whole layer as the plain LibTorch layer would (same RNG draws) and
// keeps its slice, so a model built under the same seed has the same values at every degree; or
// it splits an existing torch::nn::Linear / Embedding (DeepSpeed's AutoTP), drawing nothing.
#pragma once

#include <zero/comm/communicator.h>

#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <memory>
#include <vector>

namespace zero::tp {

// One parameter split over the tensor-parallel group of T ranks: the whole tensor, cut along
// `dim` into stride x T equal parts, of which rank r holds parts r, r + T, ... (in that order;
// Megatron's stride: a fused QKV weight of stride 3 gives each rank its q, k and v rows).
struct SplitParameter {
  at::Tensor tensor;
  int64_t dim = 0;
  int64_t stride = 1;
};

// This rank's slice of `whole`, as a SplitParameter of `dim` and `stride` holds it.
at::Tensor slice_of_whole(const at::Tensor& whole, int64_t dim, int64_t stride, int rank,
                          int parts);
// Fills `split.tensor` with this rank's slice of a whole tensor that `fill` initialises in place
// (e.g. normal_): the draws the unsplit layer makes, so the values do not depend on T.
void init_from_whole(const SplitParameter& split, const Communicator& group,
                     const std::function<void(at::Tensor&)>& fill);

// A module whose parameters are partly split over the tensor-parallel group: the engine sums
// their squares over that group for the gradient norm (the replicated ones count once) and
// assembles the whole tensors from the slices (full_parameters, save_16bit_model).
class TensorParallelModule {
 public:
  virtual ~TensorParallelModule() = default;
  virtual std::vector<SplitParameter> split_parameters() const = 0;
  virtual const std::shared_ptr<Communicator>& tensor_group() const = 0;
};

struct ColumnParallelLinearOptions {
  ColumnParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);
  TORCH_ARG(int64_t, out_features);  // the whole layer's; each rank holds out_features / T
  TORCH_ARG(bool, bias) = true;
  TORCH_ARG(bool, gather_output) = false;  // all-gather Y to the whole width
  // Megatron's stride: the outputs are `stride` blocks (a fused QKV: 3) split each on its own.
  TORCH_ARG(int64_t, stride) = 1;
  // Sequence parallelism: X arrives as this rank's part of the sequence along sequence_dim and
  // is all-gathered first (the gradient reduce-scattered back). Not with gather_output.
  TORCH_ARG(bool, sequence_parallel) = false;
  TORCH_ARG(int64_t, sequence_dim) = 0;  // Megatron's [s, b, h]; a [b, s, h] model says 1
};

class ColumnParallelLinearImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options,
                           std::shared_ptr<Communicator> group);
  // Splits an existing layer (DeepSpeed's AutoTP): this rank's slice of `whole`'s values, whose
  // sizes and bias must be the options'. No random draws.
  ColumnParallelLinearImpl(const ColumnParallelLinearOptions& options,
                           std::shared_ptr<Communicator> group, const torch::nn::Linear& whole);
  at::Tensor forward(const at::Tensor& x);
  std::vector<SplitParameter> split_parameters() const override;
  const std::shared_ptr<Communicator>& tensor_group() const override { return group_; }

  ColumnParallelLinearOptions options;
  at::Tensor weight;  // [out_features / T, in_features]; with a stride, its blocks' slices
  at::Tensor bias;    // [out_features / T] (split with the columns)

 private:
  std::shared_ptr<Communicator> group_;
};
TORCH_MODULE(ColumnParallelLinear);

struct RowParallelLinearOptions {
  RowParallelLinearOptions(int64_t in_features, int64_t out_features)
      : in_features_(in_features), out_features_(out_features) {}
  TORCH_ARG(int64_t, in_features);  // the whole layer's; each rank holds in_features / T
  TORCH_ARG(int64_t, out_features);
  TORCH_ARG(bool, bias) = true;
  TORCH_ARG(bool, input_is_parallel) = true;  // false: X is whole and gets split here
  // Sequence parallelism: Y is reduce-scattered along sequence_dim (each rank keeps its part of
  // the sequence) instead of all-reduced; the replicated bias's gradient is summed over the
  // group. Needs input_is_parallel.
  TORCH_ARG(bool, sequence_parallel) = false;
  TORCH_ARG(int64_t, sequence_dim) = 0;
};

class RowParallelLinearImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  RowParallelLinearImpl(const RowParallelLinearOptions& options,
                        std::shared_ptr<Communicator> group);
  // Splits an existing layer, as ColumnParallelLinear's.
  RowParallelLinearImpl(const RowParallelLinearOptions& options,
                        std::shared_ptr<Communicator> group, const torch::nn::Linear& whole);
  at::Tensor forward(const at::Tensor& x);
  std::vector<SplitParameter> split_parameters() const override;
  const std::shared_ptr<Communicator>& tensor_group() const override { return group_; }

  RowParallelLinearOptions options;
  at::Tensor weight;  // [out_features, in_features / T]
  at::Tensor bias;    // [out_features], replicated: added once, after the all-reduce

 private:
  std::shared_ptr<Communicator> group_;
};
TORCH_MODULE(RowParallelLinear);

class VocabParallelEmbeddingImpl : public torch::nn::Module, public TensorParallelModule {
 public:
  VocabParallelEmbeddingImpl(int64_t num_embeddings, int64_t embedding_dim,
                             std::shared_ptr<Communicator> group);
  // Splits an existing embedding: this rank's rows of `whole`'s table.
  VocabParallelEmbeddingImpl(const torch::nn::Embedding& whole,
                             std::shared_ptr<Communicator> group);
  at::Tensor forward(const at::Tensor& ids);
  std::vector<SplitParameter> split_parameters() const override { return {{weight, 0}}; }
  const std::shared_ptr<Communicator>& tensor_group() const override { return group_; }

  int64_t num_embeddings, embedding_dim, vocab_begin, vocab_end;
  at::Tensor weight;  // rows [vocab_begin, vocab_end) of the whole [num_embeddings, dim]

 private:
  std::shared_ptr<Communicator> group_;
};
TORCH_MODULE(VocabParallelEmbedding);

// Cross entropy of logits split over the vocabulary (the output of a ColumnParallelLinear
// without gather_output: [..., vocab / T], rank r holding columns [r V/T, (r+1) V/T)) against
// whole-vocabulary targets [...]: per-position losses, as at::cross_entropy with reduction none
// over the gathered logits, without gathering them (Megatron's two all-reduces of a max and a
// sum, and one of the target's logit).
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        const std::shared_ptr<Communicator>& group);

}  // namespace zero::tp
