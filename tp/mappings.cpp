// The f / g conjugates of mappings.h: autograd functions whose saved state is the group, held
// in a capsule so that a graph kept past its step keeps the communicator alive.
#include <zero/tp/mappings.h>

#include <zero/error.h>

#include <ATen/ATen.h>
#include <torch/csrc/autograd/custom_function.h>
#include <torch/nn/module.h>

namespace zero::tp {

namespace detail {

at::Tensor all_reduce_sum(const at::Tensor& x, Communicator& group) {
  at::Tensor out = x.contiguous().clone();
  if (group.world_size() > 1) group.all_reduce(out, ReduceOp::kSum)->wait();
  return out;
}

at::Tensor all_reduce_max(const at::Tensor& x, Communicator& group) {
  at::Tensor out = x.contiguous().clone();
  if (group.world_size() > 1) group.all_reduce(out, ReduceOp::kMax)->wait();
  return out;
}

at::Tensor all_gather_dim(const at::Tensor& x, Communicator& group, int64_t dim) {
  const int parts = group.world_size();
  if (parts == 1) return x;
  at::Tensor in = x.contiguous();
  dim = at::maybe_wrap_dim(dim, in.dim());
  std::vector<int64_t> stacked{parts};
  for (int64_t s : in.sizes()) stacked.push_back(s);
  at::Tensor out = at::empty(stacked, in.options());
  group.all_gather(in, out)->wait();
  // [parts, ..., n, ...] -> [..., parts, n, ...] -> [..., parts * n, ...]
  std::vector<int64_t> sizes(in.sizes().begin(), in.sizes().end());
  sizes[dim] *= parts;
  return out.movedim(0, dim).reshape(sizes);
}

at::Tensor reduce_scatter_dim(const at::Tensor& x, Communicator& group, int64_t dim) {
  const int parts = group.world_size();
  if (parts == 1) return x;
  dim = at::maybe_wrap_dim(dim, x.dim());
  const int64_t n = x.size(dim);
  ZERO_CHECK(n % parts == 0, UsageError, "tensor parallelism: dimension ", dim, " (", n,
             ") is not divisible by the tensor-parallel size ", parts);
  const at::Tensor in = x.movedim(dim, 0).contiguous();  // rank r's part: contiguous rows
  std::vector<int64_t> sizes(in.sizes().begin(), in.sizes().end());
  sizes[0] = n / parts;
  at::Tensor out = at::empty(sizes, in.options());
  group.reduce_scatter(in, out, ReduceOp::kSum)->wait();
  return out.movedim(0, dim);
}

at::Tensor slice_dim(const at::Tensor& x, int rank, int parts, int64_t dim) {
  const int64_t n = x.size(dim);
  ZERO_CHECK(n % parts == 0, UsageError, "tensor parallelism: dimension ", dim, " (", n,
             ") is not divisible by the tensor-parallel size ", parts);
  return x.narrow(dim, rank * (n / parts), n / parts).contiguous();
}

at::Tensor all_gather_last_dim(const at::Tensor& x, Communicator& group) {
  return all_gather_dim(x, group, -1);
}

at::Tensor slice_last_dim(const at::Tensor& x, int rank, int parts) {
  return slice_dim(x, rank, parts, -1);
}

}  // namespace detail

namespace {

struct GroupHolder : torch::CustomClassHolder {
  explicit GroupHolder(std::shared_ptr<Communicator> g) : group(std::move(g)) {}
  std::shared_ptr<Communicator> group;
};

c10::IValue hold(const std::shared_ptr<Communicator>& group) {
  return c10::IValue::make_capsule(c10::make_intrusive<GroupHolder>(group));
}

Communicator& held(torch::autograd::AutogradContext* ctx) {
  auto holder =
      c10::static_intrusive_pointer_cast<GroupHolder>(ctx->saved_data["group"].toCapsule());
  return *holder->group;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

struct CopyTo : torch::autograd::Function<CopyTo> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = group;
    return x.view_as(x);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {detail::all_reduce_sum(grad[0], held(ctx)), at::Tensor()};
  }
};

struct ReduceFrom : torch::autograd::Function<ReduceFrom> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    auto holder = c10::static_intrusive_pointer_cast<GroupHolder>(group.toCapsule());
    return detail::all_reduce_sum(x, *holder->group);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {grad[0], at::Tensor()};
  }
};

struct GatherFrom : torch::autograd::Function<GatherFrom> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = group;
    return detail::all_gather_last_dim(x, held(ctx));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    Communicator& g = held(ctx);
    return {detail::slice_last_dim(grad[0], g.rank(), g.world_size()), at::Tensor()};
  }
};

struct ScatterTo : torch::autograd::Function<ScatterTo> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group) {
    ctx->saved_data["group"] = group;
    Communicator& g = held(ctx);
    return detail::slice_last_dim(x, g.rank(), g.world_size());
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {detail::all_gather_last_dim(grad[0], held(ctx)), at::Tensor()};
  }
};

// Sequence parallelism: the same conjugates along the sequence dimension (saved as "dim"), each
// a pair of a forward and a backward collective along it.
using AlongDim = at::Tensor (*)(const at::Tensor&, Communicator&, int64_t);

at::Tensor own_part(const at::Tensor& x, Communicator& group, int64_t dim) {
  return detail::slice_dim(x, group.rank(), group.world_size(), dim);
}

template <AlongDim Forward, AlongDim Backward>
struct SequenceConjugate : torch::autograd::Function<SequenceConjugate<Forward, Backward>> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, c10::IValue group,
                            int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    return Forward(x, held(ctx), dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    return {Backward(grad[0], held(ctx), ctx->saved_data["dim"].toInt()), at::Tensor(),
            at::Tensor()};
  }
};

// The gradient of a gathered sequence is each rank's partial sum (its columns' share).
using GatherFromSequence = SequenceConjugate<detail::all_gather_dim, detail::reduce_scatter_dim>;
using ReduceScatterToSequence =
    SequenceConjugate<detail::reduce_scatter_dim, detail::all_gather_dim>;
using ScatterToSequence = SequenceConjugate<own_part, detail::all_gather_dim>;

// Y = all_gather(X) W^T, saving X's part: backward gathers it again for W's gradient and
// reduce-scatters X's (each rank's columns give a partial sum over the whole sequence).
struct SequenceGatheredLinear : torch::autograd::Function<SequenceGatheredLinear> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            c10::IValue group, int64_t dim) {
    ctx->saved_data["group"] = group;
    ctx->saved_data["dim"] = dim;
    ctx->save_for_backward({x, weight});
    return at::linear(detail::all_gather_dim(x, held(ctx), dim), weight);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1];
    Communicator& group = held(ctx);
    const int64_t dim = ctx->saved_data["dim"].toInt();
    const at::Tensor whole = detail::all_gather_dim(x, group, dim);
    const at::Tensor g = grad[0].contiguous();
    at::Tensor grad_weight;
    if (weight.requires_grad())
      grad_weight = g.reshape({-1, g.size(-1)}).t().mm(whole.reshape({-1, whole.size(-1)}));
    at::Tensor grad_x;
    if (x.requires_grad()) grad_x = detail::reduce_scatter_dim(g.matmul(weight), group, dim);
    return {grad_x, grad_weight, at::Tensor(), at::Tensor()};
  }
};

void check_group(const std::shared_ptr<Communicator>& group, const char* op) {
  ZERO_CHECK(group, UsageError, op, ": no tensor-parallel group");
}

}  // namespace

at::Tensor copy_to_tensor_region(const at::Tensor& x, const std::shared_ptr<Communicator>& group) {
  check_group(group, "copy_to_tensor_region");
  if (group->world_size() == 1) return x;
  return CopyTo::apply(x, hold(group));
}

at::Tensor reduce_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group) {
  check_group(group, "reduce_from_tensor_region");
  if (group->world_size() == 1) return x;
  return ReduceFrom::apply(x, hold(group));
}

at::Tensor gather_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group) {
  check_group(group, "gather_from_tensor_region");
  if (group->world_size() == 1) return x;
  return GatherFrom::apply(x, hold(group));
}

at::Tensor scatter_to_tensor_region(const at::Tensor& x,
                                    const std::shared_ptr<Communicator>& group) {
  check_group(group, "scatter_to_tensor_region");
  if (group->world_size() == 1) return x;
  return ScatterTo::apply(x, hold(group));
}

at::Tensor gather_from_sequence_region(const at::Tensor& x,
                                       const std::shared_ptr<Communicator>& group, int64_t dim) {
  check_group(group, "gather_from_sequence_region");
  if (group->world_size() == 1) return x;
  return GatherFromSequence::apply(x, hold(group), at::maybe_wrap_dim(dim, x.dim()));
}

at::Tensor reduce_scatter_to_sequence_region(const at::Tensor& x,
                                             const std::shared_ptr<Communicator>& group,
                                             int64_t dim) {
  check_group(group, "reduce_scatter_to_sequence_region");
  if (group->world_size() == 1) return x;
  return ReduceScatterToSequence::apply(x, hold(group), at::maybe_wrap_dim(dim, x.dim()));
}

at::Tensor scatter_to_sequence_region(const at::Tensor& x,
                                      const std::shared_ptr<Communicator>& group, int64_t dim) {
  check_group(group, "scatter_to_sequence_region");
  if (group->world_size() == 1) return x;
  return ScatterToSequence::apply(x, hold(group), at::maybe_wrap_dim(dim, x.dim()));
}

at::Tensor sequence_gathered_linear(const at::Tensor& x, const at::Tensor& weight,
                                    const std::shared_ptr<Communicator>& group, int64_t dim) {
  check_group(group, "sequence_gathered_linear");
  if (group->world_size() == 1) return at::linear(x, weight);
  return SequenceGatheredLinear::apply(x, weight, hold(group), at::maybe_wrap_dim(dim, x.dim()));
}

void sum_gradients_over_tensor_group(torch::nn::Module& module,
                                     const std::shared_ptr<Communicator>& group) {
  check_group(group, "sum_gradients_over_tensor_group");
  if (group->world_size() == 1) return;
  for (at::Tensor& p : module.parameters(/*recurse=*/true))
    if (p.requires_grad())
      p.register_hook(
          [group](const at::Tensor& grad) { return detail::all_reduce_sum(grad, *group); });
}

}  // namespace zero::tp
