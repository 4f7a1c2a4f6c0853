// vocab_parallel_cross_entropy (layers.h): Megatron's _VocabParallelCrossEntropy. The softmax
// is formed in fp32 from this rank's columns and the group's max and sum; backward is
// softmax - one_hot(target) on this rank's columns, times the incoming gradient.
#include <zero/tp/layers.h>
#include <zero/tp/mappings.h>

#include <zero/error.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>

namespace zero::tp {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct VocabParallelCrossEntropy : torch::autograd::Function<VocabParallelCrossEntropy> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& logits,
                            const at::Tensor& target, Communicator* group) {
    const int64_t part = logits.size(-1);
    const int64_t begin = group->rank() * part;
    at::Tensor z = logits.to(at::kFloat);
    const at::Tensor max = detail::all_reduce_max(std::get<0>(z.max(-1)), *group);
    z = z - max.unsqueeze(-1);
    const at::Tensor outside = (target < begin).logical_or(target >= begin + part);
    const at::Tensor local = (target - begin).masked_fill(outside, 0);
    const at::Tensor picked =
        z.gather(-1, local.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0);
    const at::Tensor predicted = detail::all_reduce_sum(picked, *group);
    at::Tensor e = z.exp();
    const at::Tensor sum_exp = detail::all_reduce_sum(e.sum(-1), *group);
    const at::Tensor loss = sum_exp.log() - predicted;
    e.div_(sum_exp.unsqueeze(-1));
    ctx->save_for_backward({e, local, outside});
    ctx->saved_data["dtype"] = static_cast<int64_t>(logits.scalar_type());
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    at::Tensor g = saved[0].clone();
    const at::Tensor inside = saved[2].logical_not().to(at::kFloat);
    g.scatter_add_(-1, saved[1].unsqueeze(-1), -inside.unsqueeze(-1));
    g.mul_(grad[0].unsqueeze(-1));
    const auto dtype = static_cast<at::ScalarType>(ctx->saved_data["dtype"].toInt());
    return {g.to(dtype), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& target,
                                        const std::shared_ptr<Communicator>& group) {
  ZERO_CHECK(group, UsageError, "vocab_parallel_cross_entropy: no tensor-parallel group");
  ZERO_CHECK(
      logits.dim() == target.dim() + 1 && logits.sizes().slice(0, target.dim()) == target.sizes(),
      UsageError, "vocab_parallel_cross_entropy: logits ", logits.sizes(), " do not match targets ",
      target.sizes(), " (want targets' shape + [vocab / T])");
  return VocabParallelCrossEntropy::apply(logits, target.to(at::kLong), group.get());
}

}  // namespace zero::tp
