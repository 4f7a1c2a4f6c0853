// Megatron's conjugate operators between a replicated activation and one split over the
// tensor-parallel group, as autograd functions (the only places tensor parallelism talks):
//   copy_to    f: identity forward,            all-reduce of the gradient backward
//   reduce_from g: all-reduce forward,          identity backward
//   gather_from:   all-gather on the last dim,  keep this rank's slice of the gradient
//   scatter_to:    keep this rank's slice,      all-gather of the gradient on the last dim
// Each blocks the host until its collective finished (Gloo; NCCL orders the stream).
#pragma once

#include <zero/comm/communicator.h>

#include <ATen/Tensor.h>
#include <torch/nn/module.h>

#include <memory>

namespace zero::tp {

at::Tensor copy_to_tensor_region(const at::Tensor& x, const std::shared_ptr<Communicator>& group);
at::Tensor reduce_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group);
at::Tensor gather_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group);
at::Tensor scatter_to_tensor_region(const at::Tensor& x,
                                    const std::shared_ptr<Communicator>& group);

// Sequence parallelism (Megatron's): outside the tensor-parallel regions (LayerNorm, dropout,
// the residual stream) each rank holds its 1/T of the sequence along `dim`:
//   gather_from_sequence:         all-gather along dim,  reduce-scatter of the gradient
//   reduce_scatter_to_sequence:   reduce-scatter along dim, all-gather of the gradient
//   scatter_to_sequence:          keep this rank's part, all-gather of the gradient
at::Tensor gather_from_sequence_region(const at::Tensor& x,
                                       const std::shared_ptr<Communicator>& group, int64_t dim);
at::Tensor reduce_scatter_to_sequence_region(const at::Tensor& x,
                                             const std::shared_ptr<Communicator>& group,
                                             int64_t dim);
at::Tensor scatter_to_sequence_region(const at::Tensor& x,
                                      const std::shared_ptr<Communicator>& group, int64_t dim);
// The column-parallel matrix under sequence parallelism: linear(gather_from_sequence(x), weight)
// as one autograd function that keeps only this rank's part of x for backward and all-gathers
// it again there (Megatron's), so a layer holds 1/T of its input instead of the whole sequence.
at::Tensor sequence_gathered_linear(const at::Tensor& x, const at::Tensor& weight,
                                    const std::shared_ptr<Communicator>& group, int64_t dim);
// A replicated module inside the sequence-parallel region (a LayerNorm) sees only this rank's
// part of the sequence: its parameters' gradients are summed over the group as autograd
// computes them (a hook on each parameter). Call it once per module.
void sum_gradients_over_tensor_group(torch::nn::Module& module,
                                     const std::shared_ptr<Communicator>& group);

namespace detail {
// Plain (autograd-free) collectives the functions above and the vocab-parallel layers share.
at::Tensor all_reduce_sum(const at::Tensor& x, Communicator& group);
at::Tensor all_reduce_max(const at::Tensor& x, Communicator& group);
// Rank r's [.., n, ..] lands in [.., r n : (r+1) n, ..] along `dim` of the result.
at::Tensor all_gather_dim(const at::Tensor& x, Communicator& group, int64_t dim);
// The sum over the group, of which this rank keeps its part r along `dim`.
at::Tensor reduce_scatter_dim(const at::Tensor& x, Communicator& group, int64_t dim);
at::Tensor slice_dim(const at::Tensor& x, int rank, int parts, int64_t dim);
at::Tensor all_gather_last_dim(const at::Tensor& x, Communicator& group);
at::Tensor slice_last_dim(const at::Tensor& x, int rank, int parts);
}  // namespace detail

}  // namespace zero::tp
