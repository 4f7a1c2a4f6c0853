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

#include <memory>

namespace zero::tp {

at::Tensor copy_to_tensor_region(const at::Tensor& x, const std::shared_ptr<Communicator>& group);
at::Tensor reduce_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group);
at::Tensor gather_from_tensor_region(const at::Tensor& x,
                                     const std::shared_ptr<Communicator>& group);
at::Tensor scatter_to_tensor_region(const at::Tensor& x,
                                    const std::shared_ptr<Communicator>& group);

namespace detail {
// Plain (autograd-free) collectives the functions above and the vocab-parallel layers share.
at::Tensor all_reduce_sum(const at::Tensor& x, Communicator& group);
at::Tensor all_reduce_max(const at::Tensor& x, Communicator& group);
at::Tensor all_gather_last_dim(const at::Tensor& x, Communicator& group);
at::Tensor slice_last_dim(const at::Tensor& x, int rank, int parts);
}  // namespace detail

}  // namespace zero::tp
