// The checkpoint code's small collectives (see checkpoint_io.h).
#include "save_load/io.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>

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

std::vector<std::string> all_gather_text(Communicator& comm, const std::string& text,
                                         at::Device device) {
  if (comm.world_size() == 1) return {text};
  const std::vector<int64_t> sizes =
      all_gather_values(comm, {static_cast<int64_t>(text.size())}, device);
  const int64_t slots = (*std::max_element(sizes.begin(), sizes.end()) + 7) / 8;
  at::Tensor mine = at::zeros({std::max<int64_t>(slots, 1)}, at::TensorOptions().dtype(at::kLong));
  std::memcpy(mine.data_ptr(), text.data(), text.size());
  mine = mine.to(device);
  at::Tensor all = at::empty({mine.numel() * comm.world_size()}, mine.options());
  comm.all_gather(mine, all)->wait();
  all = all.cpu();
  std::vector<std::string> out;
  for (int r = 0; r < comm.world_size(); ++r)
    out.emplace_back(static_cast<const char*>(all.data_ptr()) + r * mine.numel() * 8,
                     static_cast<size_t>(sizes[r]));
  return out;
}

std::string broadcast_text(Communicator& comm, const std::string& text, int root,
                           at::Device device) {
  const int64_t n = broadcast_value(comm, static_cast<int64_t>(text.size()), device, root);
  at::Tensor packed = at::zeros({(n + 7) / 8}, at::TensorOptions().dtype(at::kLong));
  if (comm.rank() == root) std::memcpy(packed.data_ptr(), text.data(), text.size());
  packed = packed.to(device);
  comm.broadcast(packed, root)->wait();
  packed = packed.cpu();
  return std::string(static_cast<const char*>(packed.data_ptr()), static_cast<size_t>(n));
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
    // Every rank reports the first failing rank's own words, so rank 0's log says what broke.
    const std::string first = s.comm->world_size() == 1
                                  ? error
                                  : broadcast_text(*s.comm, error.substr(0, 4096), r, device);
    throw CheckpointError(
        zero::detail::str("checkpoint: ", what, " failed on rank ", r, ": ", first));
  }
}

}  // namespace zero::detail
