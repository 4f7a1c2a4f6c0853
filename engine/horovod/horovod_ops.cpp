// Horovod's free functions on the engine's world communicator: broadcast_parameters (fused per
// element size, bit for bit), broadcast_optimizer_state (root's save() loaded by the others) and
// allreduce for metrics.
#include "world_setup.h"

#include <zero/engine/horovod/distributed_optimizer.h>
#include <zero/engine/engine.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/archive.h>

#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace zero {
namespace {

std::shared_ptr<Communicator> comm_for_device(const at::Device& device) {
  return world_communicator(device.is_cuda() ? Backend::kNccl : Backend::kGloo);
}

void check_root(const Communicator& comm, int root, const char* what) {
  ZERO_CHECK(root >= 0 && root < comm.world_size(), UsageError, what, ": root ", root,
             " is not a rank of a world of ", comm.world_size());
}

// The integer (or half) type of the same width, which a broadcast copies bit for bit; 1-byte
// types travel as int32.
c10::ScalarType wire_type(size_t element_bytes) {
  switch (element_bytes) {
    case 8:
      return at::kLong;
    case 4:
      return at::kInt;
    case 2:
      return at::kHalf;
    default:
      return at::kInt;
  }
}

at::Tensor as_wire(const at::Tensor& t) {
  const size_t width = t.element_size();
  const at::Tensor flat = t.detach().contiguous().reshape({-1});
  return width == 1 ? flat.to(at::kInt) : flat.view(wire_type(width));
}

// Broadcasts root's bytes; the others' `bytes` are replaced (sizes may differ before).
void broadcast_bytes(Communicator& comm, std::string& bytes, int root, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(at::kLong).device(device);
  at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), opts);
  comm.broadcast(size, root)->wait();
  const int64_t n = size.cpu().item<int64_t>();
  at::Tensor host = at::zeros({(n + 7) / 8}, at::kLong);
  if (comm.rank() == root) std::memcpy(host.data_ptr(), bytes.data(), bytes.size());
  at::Tensor wire = host.to(device);
  if (wire.numel() > 0) comm.broadcast(wire, root)->wait();
  if (comm.rank() == root) return;
  host = wire.cpu();
  bytes.assign(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(n));
}

}  // namespace

void broadcast_parameters(torch::nn::Module& module, int root, std::shared_ptr<Communicator> comm) {
  std::vector<at::Tensor> tensors = module.parameters(/*recurse=*/true);
  for (const at::Tensor& b : module.buffers(/*recurse=*/true)) tensors.push_back(b);
  if (tensors.empty()) return;
  if (!comm) comm = detail::communicator_for(module);
  check_root(*comm, root, "broadcast_parameters");
  if (comm->world_size() == 1) return;
  at::NoGradGuard no_grad;
  // One fused broadcast per wire type, in the module's order (the same on every rank).
  std::map<c10::ScalarType, std::vector<at::Tensor>> by_wire;
  for (const at::Tensor& t : tensors)
    if (t.numel() > 0) by_wire[wire_type(t.element_size())].push_back(t);
  for (auto& [type, group] : by_wire) {
    std::vector<at::Tensor> pieces;
    for (const at::Tensor& t : group) pieces.push_back(as_wire(t));
    at::Tensor flat = at::cat(pieces);
    comm->broadcast(flat, root)->wait();
    int64_t at = 0;
    for (at::Tensor t : group) {
      at::Tensor piece = flat.narrow(0, at, t.numel());
      at += t.numel();
      if (t.element_size() == 1)
        t.copy_(piece.to(t.scalar_type()).view(t.sizes()));
      else
        t.copy_(piece.view(t.scalar_type()).view(t.sizes()));
    }
  }
}

void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root,
                               std::shared_ptr<Communicator> comm) {
  at::Device device(at::kCPU);
  for (const auto& group : optimizer.param_groups())
    for (const at::Tensor& p : group.params()) device = p.device();
  if (!comm) comm = comm_for_device(device);
  check_root(*comm, root, "broadcast_optimizer_state");
  if (comm->world_size() == 1) return;
  // save() writes the state but load() leaves param-group options alone: they travel apart.
  std::string bytes;
  if (comm->rank() == root) {
    torch::serialize::OutputArchive archive, state;
    optimizer.save(state);
    archive.write("state", state);
    for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
      torch::serialize::OutputArchive options;
      optimizer.param_groups()[i].options().serialize(options);
      archive.write("options/" + std::to_string(i), options);
    }
    std::ostringstream out;
    archive.save_to(out);
    bytes = out.str();
  }
  broadcast_bytes(*comm, bytes, root, comm->backend() == Backend::kNccl ? device : at::kCPU);
  if (comm->rank() == root) return;
  torch::serialize::InputArchive archive, state;
  archive.load_from(bytes.data(), bytes.size(), device);
  archive.read("state", state);
  optimizer.state().clear();  // load() only adds root's entries
  optimizer.load(state);
  for (size_t i = 0; i < optimizer.param_groups().size(); ++i) {
    torch::serialize::InputArchive options;
    archive.read("options/" + std::to_string(i), options);
    optimizer.param_groups()[i].options().serialize(options);
  }
}

at::Tensor allreduce(const at::Tensor& tensor, ReduceOp op, std::shared_ptr<Communicator> comm) {
  ZERO_CHECK(tensor.defined(), UsageError, "allreduce: undefined tensor");
  if (!comm) comm = comm_for_device(tensor.device());
  at::Tensor out = tensor.detach().contiguous().clone();
  if (comm->world_size() > 1) comm->all_reduce(out, op)->wait();
  return out.view(tensor.sizes());
}

}  // namespace zero
