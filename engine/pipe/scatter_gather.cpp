// Megatron's scatter/gather of the tensors crossing pipeline stages (pipe_partitioned,
// grad_partitioned): each tensor rank sends its 1/tp of a tensor every tensor rank of the stage
// holds, and the receiving stage's tensor group puts the whole back together.
#include <zero/engine/pipe/p2p.h>

#include <zero/error.h>

#include <ATen/ATen.h>

namespace zero::pipe {

std::vector<at::Tensor> scatter_for_stage(const at::Tensor& whole, int rank, int size) {
  ZERO_ASSERT(size >= 1 && rank >= 0 && rank < size, "tensor rank ", rank, " of ", size);
  const int64_t numel = whole.numel(), slice_numel = (numel + size - 1) / size;
  const int64_t begin = std::min(numel, rank * slice_numel),
                end = std::min(numel, begin + slice_numel);
  at::Tensor slice = at::zeros({slice_numel}, whole.options());
  if (end > begin)
    slice.narrow(0, 0, end - begin).copy_(whole.reshape({-1}).narrow(0, begin, end - begin));
  at::Tensor shape =
      at::tensor(whole.sizes().vec(), at::TensorOptions().dtype(at::kLong)).to(whole.device());
  return {slice, shape};
}

at::Tensor gather_from_stage(Communicator& tensor_group, const std::vector<at::Tensor>& received,
                             const std::string& what) {
  ZERO_CHECK(
      received.size() == 2 && received[1].scalar_type() == at::kLong && received[1].dim() == 1,
      UsageError, "pipeline: ", what, " arrived as ", received.size(),
      " tensors, not a slice and its shape (pipe_partitioned or grad_partitioned differ "
      "between the stages?)");
  const at::Tensor& slice = received[0];
  at::Tensor flat = at::empty({slice.numel() * tensor_group.world_size()}, slice.options());
  tensor_group.all_gather(slice.contiguous(), flat)->wait();
  const at::Tensor shape = received[1].cpu();
  const std::vector<int64_t> sizes(shape.data_ptr<int64_t>(),
                                   shape.data_ptr<int64_t>() + shape.numel());
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  ZERO_CHECK(numel <= flat.numel(), UsageError, "pipeline: ", what, ": ", tensor_group.world_size(),
             " slices of ", slice.numel(), " elements cannot hold a tensor of ", numel);
  return flat.narrow(0, 0, numel).view(sizes);
}

void check_replicated(Communicator& tensor_group, const at::Tensor& tensor, const std::string& what,
                      const char* key) {
  // Equal tensors give equal sums bit for bit; a rank's own slice of a sequence does not. The
  // double sums travel as their bits (int64: the transports carry no double).
  const at::Tensor t = tensor.detach().to(at::kDouble);
  at::Tensor mine = at::stack({at::scalar_tensor(static_cast<double>(t.numel()), t.options()),
                               t.sum(), (t * t).sum()})
                        .view(at::kLong);
  at::Tensor all = at::empty({3 * tensor_group.world_size()}, mine.options());
  tensor_group.all_gather(mine, all)->wait();
  const at::Tensor rows = all.view({tensor_group.world_size(), 3}).cpu();
  for (int r = 1; r < tensor_group.world_size(); ++r)
    ZERO_CHECK(at::equal(rows[r], rows[0]), UsageError, "pipeline.", key, ": the ", what,
               " differs between tensor ranks 0 and ", r,
               " of its stage, so no rank can send 1/tp of it for all (layers that leave each "
               "tensor rank its own part, such as sequence-parallel ones?); set pipeline.",
               key, " to false");
}

}  // namespace zero::pipe
