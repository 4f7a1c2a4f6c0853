// The NCCL backend on one GPU (a world of one; NCCL allows one rank per device): every
// collective and dtype round-trips exactly. Exits 77 (skipped) without a CUDA device.
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include "catch_after_torch.h"

#include <cstdlib>
#include <vector>

using namespace zero;

namespace {
// Device tensors without relying on LibTorch's CUDA support: cudaMalloc + from_blob.
struct DeviceTensor {
  void* ptr = nullptr;
  at::Tensor t;
  DeviceTensor(const at::Tensor& host) {
    REQUIRE(cudaMalloc(&ptr, std::max<size_t>(host.nbytes(), 1)) == cudaSuccess);
    REQUIRE(cudaMemcpy(ptr, host.data_ptr(), host.nbytes(), cudaMemcpyHostToDevice) == cudaSuccess);
    t = at::from_blob(ptr, host.sizes(),
                      at::TensorOptions().dtype(host.scalar_type()).device(at::kCUDA, 0));
  }
  ~DeviceTensor() { cudaFree(ptr); }
  at::Tensor host() const {
    at::Tensor h = at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
    REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
    REQUIRE(cudaMemcpy(h.data_ptr(), ptr, h.nbytes(), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
};
}  // namespace

TEST_CASE("NCCL backend, world of one: all collectives, all dtypes") {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) std::exit(77);
  CommOptions opts;
  opts.backend = Backend::kNccl;
  opts.device_index = 0;
  auto c = init_communicator(RankEnv{}, opts);
  REQUIRE(c->backend() == Backend::kNccl);
  for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong}) {
    at::Tensor data = at::arange(1000, at::kLong).remainder(13).to(dt);
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
      if (op == ReduceOp::kAvg && (dt == at::kInt || dt == at::kLong)) continue;
      DeviceTensor t(data);
      c->all_reduce(t.t, op)->wait();
      CHECK(at::equal(t.host(), data));
    }
    DeviceTensor in(data), out(at::zeros({1000}, dt)), g(at::zeros({1000}, dt));
    c->reduce_scatter_v(in.t, out.t, {1000}, ReduceOp::kSum)->wait();
    CHECK(at::equal(out.host(), data));
    c->all_gather_v(in.t, g.t, {1000})->wait();
    CHECK(at::equal(g.host(), data));
    c->broadcast(in.t, 0)->wait();
    CHECK(at::equal(in.host(), data));
  }
  c->barrier()->wait();
  auto sub = c->new_group({0});
  REQUIRE(sub);
  sub->barrier()->wait();
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
}
