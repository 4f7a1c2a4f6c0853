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

// A whole layer to split must have the sizes and bias the options say.
void check_whole(const torch::nn::LinearImpl& whole, int64_t in, int64_t out, bool bias,
                 const char* layer) {
  ZERO_CHECK(whole.weight.dim() == 2 && whole.weight.size(0) == out && whole.weight.size(1) == in,
             UsageError, layer, ": the whole layer's weight is ", whole.weight.sizes(),
             " but the options say in_features ", in, ", out_features ", out);
  ZERO_CHECK(whole.bias.defined() == bias, UsageError, layer, ": the whole layer ",
             whole.bias.defined() ? "has" : "has no", " bias but the options say bias(", bias, ")");
}

}  // namespace

at::Tensor slice_of_whole(const at::Tensor& whole, int64_t dim, int64_t stride, int rank,
                          int parts) {
  const int64_t chunk = whole.size(dim) / (stride * parts);
  ZERO_CHECK(chunk * stride * parts == whole.size(dim), UsageError,
             "tensor parallelism: ", "dimension ", dim, " of ", whole.sizes(),
             " is not divisible by stride ", stride, " x ", parts, " ranks");
  std::vector<at::Tensor> mine;
  for (int64_t s = 0; s < stride; ++s)
    mine.push_back(whole.narrow(dim, (s * parts + rank) * chunk, chunk));
  return at::cat(mine, dim).detach().contiguous();
}

void init_from_whole(const SplitParameter& split, const Communicator& group,
                     const std::function<void(at::Tensor&)>& fill) {
  std::vector<int64_t> sizes(split.tensor.sizes().begin(), split.tensor.sizes().end());
  sizes[split.dim] *= group.world_size();
  at::Tensor whole = at::empty(sizes, split.tensor.options().device(at::kCPU));
  fill(whole);
  at::NoGradGuard no_grad;
  split.tensor.copy_(
      slice_of_whole(whole, split.dim, split.stride, group.rank(), group.world_size()));
}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& o,
                                                   std::shared_ptr<Communicator> group)
    : ColumnParallelLinearImpl(
          o, std::move(group),
          torch::nn::Linear(
              torch::nn::LinearOptions(o.in_features(), o.out_features()).bias(o.bias()))) {}

ColumnParallelLinearImpl::ColumnParallelLinearImpl(const ColumnParallelLinearOptions& o,
                                                   std::shared_ptr<Communicator> group,
                                                   const torch::nn::Linear& whole)
    : options(o), group_(std::move(group)) {
  check_whole(*whole, o.in_features(), o.out_features(), o.bias(), "ColumnParallelLinear");
  const Communicator& g = checked(group_, "ColumnParallelLinear");
  ZERO_CHECK(o.stride() >= 1, UsageError, "ColumnParallelLinear: stride ", o.stride());
  ZERO_CHECK(!(o.sequence_parallel() && o.gather_output()), UsageError,
             "ColumnParallelLinear: sequence_parallel with gather_output (the output would leave "
             "the sequence-parallel layout whole; gather it yourself if that is meant)");
  part_of(o.out_features(), g, "ColumnParallelLinear", "out_features");
  ZERO_CHECK(o.out_features() % (o.stride() * g.world_size()) == 0, UsageError,
             "ColumnParallelLinear: out_features (", o.out_features(),
             ") is not divisible by stride ", o.stride(), " x the tensor-parallel size ",
             g.world_size());
  weight = register_parameter(
      "weight", slice_of_whole(whole->weight, 0, o.stride(), g.rank(), g.world_size()));
  if (o.bias())
    bias = register_parameter("bias",
                              slice_of_whole(whole->bias, 0, o.stride(), g.rank(), g.world_size()));
}

at::Tensor ColumnParallelLinearImpl::forward(const at::Tensor& x) {
  at::Tensor y;
  if (options.sequence_parallel()) {
    y = sequence_gathered_linear(x, weight, group_, options.sequence_dim());
    if (bias.defined()) y = y + bias;
  } else {
    y = at::linear(copy_to_tensor_region(x, group_), weight, bias);
  }
  if (!options.gather_output()) return y;
  y = gather_from_tensor_region(y, group_);  // [..., T x stride x c]: rank-major
  if (options.stride() == 1) return y;
  std::vector<int64_t> blocks(y.sizes().begin(), y.sizes().end() - 1);
  const int64_t chunk = weight.size(0) / options.stride();
  blocks.insert(blocks.end(), {group_->world_size(), options.stride(), chunk});
  return y.view(blocks).transpose(-3, -2).reshape(y.sizes());  // stride-major, as the whole
}

std::vector<SplitParameter> ColumnParallelLinearImpl::split_parameters() const {
  if (bias.defined()) return {{weight, 0, options.stride()}, {bias, 0, options.stride()}};
  return {{weight, 0, options.stride()}};
}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& o,
                                             std::shared_ptr<Communicator> group)
    : RowParallelLinearImpl(
          o, std::move(group),
          torch::nn::Linear(
              torch::nn::LinearOptions(o.in_features(), o.out_features()).bias(o.bias()))) {}

RowParallelLinearImpl::RowParallelLinearImpl(const RowParallelLinearOptions& o,
                                             std::shared_ptr<Communicator> group,
                                             const torch::nn::Linear& whole)
    : options(o), group_(std::move(group)) {
  check_whole(*whole, o.in_features(), o.out_features(), o.bias(), "RowParallelLinear");
  const Communicator& g = checked(group_, "RowParallelLinear");
  const int64_t part = part_of(o.in_features(), g, "RowParallelLinear", "in_features");
  ZERO_CHECK(!o.sequence_parallel() || o.input_is_parallel(), UsageError,
             "RowParallelLinear: sequence_parallel needs input_is_parallel");
  weight = register_parameter(
      "weight", whole->weight.narrow(1, g.rank() * part, part).detach().contiguous().clone());
  if (o.bias()) bias = register_parameter("bias", whole->bias.detach().clone());
  if (o.bias() && o.sequence_parallel())  // added to this rank's part of the sequence only
    bias.register_hook(
        [group = group_](const at::Tensor& grad) { return detail::all_reduce_sum(grad, *group); });
}

at::Tensor RowParallelLinearImpl::forward(const at::Tensor& x) {
  const at::Tensor xp = options.input_is_parallel() ? x : scatter_to_tensor_region(x, group_);
  const at::Tensor partial = at::linear(xp, weight);
  at::Tensor y = options.sequence_parallel()
                     ? reduce_scatter_to_sequence_region(partial, group_, options.sequence_dim())
                     : reduce_from_tensor_region(partial, group_);
  return bias.defined() ? y + bias : y;
}

std::vector<SplitParameter> RowParallelLinearImpl::split_parameters() const {
  return {{weight, 1}};  // [out, in / T]; the bias is replicated
}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(int64_t num, int64_t dim,
                                                       std::shared_ptr<Communicator> group)
    : VocabParallelEmbeddingImpl(torch::nn::Embedding(num, dim), std::move(group)) {}

VocabParallelEmbeddingImpl::VocabParallelEmbeddingImpl(const torch::nn::Embedding& whole,
                                                       std::shared_ptr<Communicator> group)
    : num_embeddings(whole->weight.size(0)),
      embedding_dim(whole->weight.size(1)),
      group_(std::move(group)) {
  const Communicator& g = checked(group_, "VocabParallelEmbedding");
  const int64_t part = part_of(num_embeddings, g, "VocabParallelEmbedding", "num_embeddings");
  vocab_begin = g.rank() * part;
  vocab_end = vocab_begin + part;
  weight =
      register_parameter("weight", slice_of_whole(whole->weight, 0, 1, g.rank(), g.world_size()));
}

at::Tensor VocabParallelEmbeddingImpl::forward(const at::Tensor& ids) {
  if (group_->world_size() == 1) return at::embedding(weight, ids);
  const at::Tensor outside = (ids < vocab_begin).logical_or(ids >= vocab_end);
  const at::Tensor local = (ids - vocab_begin).masked_fill(outside, 0);
  at::Tensor out = at::embedding(weight, local).masked_fill(outside.unsqueeze(-1), 0.0);
  return reduce_from_tensor_region(out, group_);
}

}  // namespace zero::tp
