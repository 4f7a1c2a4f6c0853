// The checkpoint code's small collectives (see checkpoint_io.h).
#include "checkpoint_io.h"

#include <ATen/ATen.h>

namespace zero::detail {

std::vector<int64_t> all_gather_values(Communicator& comm, const std::vector<int64_t>& values,
                                       at::Device device) {
  const int64_t n = static_cast<int64_t>(values.size());
  const auto opts = at::TensorOptions().dtype(at::kLong);
  at::Tensor mine = at::from_blob(const_cast<int64_t*>(values.data()), {n}, opts).to(device);
  if (comm.world_size() == 1) return values;
  at::Tensor all = at::empty({n * comm.world_size()}, opts.device(device));
  comm.all_gather(mine, all)->wait();
  all = all.cpu();
  return std::vector<int64_t>(all.data_ptr<int64_t>(), all.data_ptr<int64_t>() + all.numel());
}

int64_t broadcast_value(Communicator& comm, int64_t value, at::Device device, int root) {
  if (comm.world_size() == 1) return value;
  at::Tensor t = at::full({1}, value, at::TensorOptions().dtype(at::kLong).device(device));
  comm.broadcast(t, root)->wait();
  return t.cpu().item<int64_t>();
}

void agree(const Engine::Impl& s, const std::string& what, at::Device device,
           const std::function<void()>& step) {
  std::string error;
  try {
    step();
  } catch (const Error& e) {
    error = e.what();
  }
  const auto ok = all_gather_values(*s.comm, {error.empty() ? 1 : 0}, device);
  for (int r = 0; r < s.comm->world_size(); ++r) {
    if (ok[r] == 1) continue;
    throw CheckpointError(zero::detail::str("checkpoint: ", what, " failed on rank ", r,
                              error.empty() ? " (see that rank's error)" : ": " + error));
  }
}

}  // namespace zero::detail
