// The NCCL backend across ranks, one GPU each (NCCL allows one rank per device), started by
// nccl_ranks.sh under zerorun: every reduction of every dtype against the value computed on the
// host from what each rank contributed, so a backend that only copies its input fails (the
// world-of-one test in test_nccl.cpp cannot tell). `nccl_ranks --devices` prints the GPU count.
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace zero;

namespace {

int g_failures = 0;
int g_rank = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "[rank %d] FAILED: %s\n", g_rank, what.c_str());
  ++g_failures;
}

void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw CudaError(std::string(what) + ": " + cudaGetErrorString(e));
}

// A device copy of `host` (cudaMalloc + from_blob: no reliance on LibTorch's CUDA build).
struct DeviceTensor {
  void* ptr = nullptr;
  at::Tensor t;
  DeviceTensor(const at::Tensor& host, int device) {
    check_cuda(cudaMalloc(&ptr, std::max<size_t>(host.nbytes(), 1)), "cudaMalloc");
    check_cuda(cudaMemcpy(ptr, host.data_ptr(), host.nbytes(), cudaMemcpyHostToDevice),
               "cudaMemcpy");
    t = at::from_blob(ptr, host.sizes(),
                      at::TensorOptions().dtype(host.scalar_type()).device(at::kCUDA, device));
  }
  ~DeviceTensor() { cudaFree(ptr); }
  at::Tensor host() const {
    at::Tensor h = at::empty(t.sizes(), at::TensorOptions().dtype(t.scalar_type()));
    check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    check_cuda(cudaMemcpy(h.data_ptr(), ptr, h.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
};

// Rank r's contribution: small integers (exact in every dtype, also summed over 8 ranks).
at::Tensor contribution(int rank, int64_t n, at::ScalarType dt) {
  return (at::arange(n, at::kLong) * (rank + 1)).remainder(7 + rank).to(dt);
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (argc > 1 && std::strcmp(argv[1], "--devices") == 0) {
    std::printf("%d\n", devices);
    return 0;
  }
  try {
    const RankEnv env = detect_rank_env();
    g_rank = env.rank;
    const int world = env.world_size;
    CommOptions opts;
    opts.backend = Backend::kNccl;
    auto c = init_communicator(env, opts);
    const int device = env.local_rank;
    const int64_t n = 1000;
    for (at::ScalarType dt : {at::kFloat, at::kHalf, at::kBFloat16, at::kInt, at::kLong}) {
      const std::string name = c10::toString(dt);
      std::vector<at::Tensor> all;
      for (int r = 0; r < world; ++r) all.push_back(contribution(r, n, dt).to(at::kDouble));
      const at::Tensor sum = at::stack(all).sum(0), max = std::get<0>(at::stack(all).max(0));
      const at::Tensor mine = contribution(env.rank, n, dt);
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
        if (op == ReduceOp::kAvg && !at::isFloatingType(dt)) continue;
        DeviceTensor t(mine, device);
        c->all_reduce(t.t, op)->wait();
        const at::Tensor want = op == ReduceOp::kSum   ? sum
                                : op == ReduceOp::kMax ? max
                                                       : sum / world;
        expect(at::equal(t.host().to(at::kDouble), want.to(dt).to(at::kDouble)),
               "all_reduce " + name + " op " + std::to_string(static_cast<int>(op)));
      }
      // Uneven counts: rank r's part of the sum is counts[r] long.
      std::vector<int64_t> counts;
      int64_t left = n;
      for (int r = 0; r < world; ++r) {
        counts.push_back(r == world - 1 ? left : n / world + (r % 2 ? 3 : -3));
        left -= counts.back();
      }
      int64_t begin = 0;
      for (int r = 0; r < env.rank; ++r) begin += counts[r];
      DeviceTensor in(mine, device), part(at::zeros({counts[env.rank]}, dt), device);
      c->reduce_scatter_v(in.t, part.t, counts, ReduceOp::kSum)->wait();
      expect(at::equal(part.host().to(at::kDouble), sum.narrow(0, begin, counts[env.rank])),
             "reduce_scatter_v " + name);
      DeviceTensor own(mine.narrow(0, begin, counts[env.rank]).contiguous(), device),
          gathered(at::zeros({n}, dt), device);
      c->all_gather_v(own.t, gathered.t, counts)->wait();
      std::vector<at::Tensor> pieces;
      int64_t at_ = 0;
      for (int r = 0; r < world; ++r) {
        pieces.push_back(contribution(r, n, dt).narrow(0, at_, counts[r]));
        at_ += counts[r];
      }
      expect(at::equal(gathered.host(), at::cat(pieces)), "all_gather_v " + name);
      DeviceTensor b(mine, device);
      c->broadcast(b.t, world - 1)->wait();
      expect(at::equal(b.host(), contribution(world - 1, n, dt)),
             "broadcast from the last rank " + name);
    }
    // A group of the even ranks sums only theirs.
    std::vector<int> evens;
    for (int r = 0; r < world; r += 2) evens.push_back(r);
    auto group = c->new_group(evens);
    if (group) {
      DeviceTensor t(at::full({4}, static_cast<float>(env.rank + 1)), device);
      group->all_reduce(t.t, ReduceOp::kSum)->wait();
      float want = 0;
      for (int r : evens) want += static_cast<float>(r + 1);
      expect(at::equal(t.host(), at::full({4}, want)), "all_reduce in the group of even ranks");
    }
    c->barrier()->wait();
    if (g_failures == 0 && env.rank == 0)
      std::printf("nccl_ranks: %d ranks, every reduction equals the host's\n", world);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] %s\n", g_rank, e.what());
    return 1;
  }
  return g_failures ? 1 : 0;
}
