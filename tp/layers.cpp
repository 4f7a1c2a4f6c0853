// The tensor-parallel layers of layers.h: each one's slice of a whole plain LibTorch layer,
// and its forward through the conjugate operators of mappings.h.
#include <zero/tp/layers.h>
#include <zero/tp/mappings.h>

#include <zero/error.h>

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <ATen/ATen.h>

namespace zero::tp {
namespace {

const Communicator& checked(const std::shared_ptr<Communicator>& group, const char* layer) {
  ZERO_CHECK(group, UsageError, layer, ": no tensor-parallel group");
  return *group;
}

// The size each rank holds of `whole`, or a UsageError naming the layer and the dimension.
int64_t part_of(int64_t whole, const Communicator& group, const char* layer, const char* what) {
  const int t = group.world_size();
  ZERO_CHECK(whole % t == 0, UsageError, layer, ": ", what, " (", whole,
             ") is not divisible by the tensor-parallel size ", t);
  return whole / t;
}

at::Tensor rows(const at::Tensor& whole, int64_t part, int rank) {
  return whole.narrow(0, rank * part, part).detach().clone();
}

}  // namespace

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& o,
                                                   std::shared_ptr<Communicator> group)
    : options(o), group_(std::move(group)) {
  const Communicator& g = checked(group_, "ColumnParallelLinear");
  const int64_t part = part_of(o.out_features(), g, "ColumnParallelLinear", "out_features");
  torch::nn::Linear whole(
      torch::nn::LinearOptions(o.in_features(), o.out_features()).bias(o.bias()));
  weight = register_parameter("weight", rows(whole->weight, part, g.rank()));
  if (o.bias()) bias = register_parameter("bias", rows(whole->bias, part, g.rank()));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y = at::linear(copy_to_tensor_region(x, group_), weight, bias);
  return options.gather_output() ? gather_from_tensor_region(y, group_) : y;
}

std::vector<SplitParameter> ColumnParallelLinearImpl::split_parameters() const {
  if (bias.defined()) return {{weight, 0}, {bias, 0}};
  return {{weight, 0}};
}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& o,
                                             std::shared_ptr<Communicator> group)
    : options(o), group_(std::move(group)) {
  const Communicator& g = checked(group_, "RowParallelLinear");
  const int64_t part = part_of(o.in_features(), g, "RowParallelLinear", "in_features");
  torch::nn::Linear whole(
      torch::nn::LinearOptions(o.in_features(), o.out_features()).bias(o.bias()));
  weight = register_parameter(
      "weight", whole->weight.narrow(1, g.rank() * part, part).detach().contiguous().clone());
  if (o.bias()) bias = register_parameter("bias", whole->bias.detach().clone());
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor xp = options.input_is_parallel() ? x : scatter_to_tensor_region(x, group_);
  at::Tensor y = reduce_from_tensor_region(at::linear(xp, weight), group_);
  return bias.defined() ? y + bias : y;
}

std::vector<SplitParameter> RowParallelLinearImpl::split_parameters() const {
  return {{weight, 1}};  // [out, in / T]; the bias is replicated
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t num, int64_t dim,
                                                       std::shared_ptr<Communicator> group)
    : num_embeddings(num), embedding_dim(dim), group_(std::move(group)) {
  const Communicator& g = checked(group_, "VocabParallelEmbedding");
  const int64_t part = part_of(num, g, "VocabParallelEmbedding", "num_embeddings");
  vocab_begin = g.rank() * part;
  vocab_end = vocab_begin + part;
  torch::nn::Embedding whole(num, dim);
  weight = register_parameter("weight", rows(whole->weight, part, g.rank()));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (group_->world_size() == 1) return at::embedding(weight, ids);
  const at::Tensor outside = (ids < vocab_begin).logical_or(ids >= vocab_end);
  const at::Tensor local = (ids - vocab_begin).masked_fill(outside, 0);
  at::Tensor out = at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_tensor_region(out, group_);
}

}  // namespace zero::tp
