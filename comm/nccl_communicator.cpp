// The NCCL backend: collectives enqueued on the communicator's own stream, ordered after the
// caller's current stream with events; a watchdog aborts collectives that exceed the timeout.
#include "nccl_communicator.h"
#include "nccl_work.h"
#include "p2p.h"

#include <zero/comm/comms_log.h>
#include <zero/error.h>

#include <cuda_runtime.h>
#include <nccl.h>

#if defined(ZERO_TORCH_HAS_CUDA)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

namespace zero::detail {
namespace {

ncclDataType_t nccl_dtype(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat:
      return ncclFloat32;
    case at::kHalf:
      return ncclFloat16;
    case at::kBFloat16:
      return ncclBfloat16;
    case at::kInt:
      return ncclInt32;
    case at::kLong:
      return ncclInt64;
    case at::kChar:
      return ncclInt8;
    default:
      break;
  }
  throw UsageError(str(op, ": unsupported dtype ", c10::toString(t),
                       " (supported: float32, float16, bfloat16, int8, int32, int64)"));
}

// ncclAvg pre-multiplies every input by 1/n rounded to the dtype (bf16 1/3 = 0.33398): exact
// only where 1/n is, a power-of-two world. Elsewhere kAvg keeps communicator.h's promise by
// summing and dividing once afterwards (divide_after).
bool avg_needs_division(ReduceOp op, at::ScalarType t, int size) {
  const bool floating = t == at::kFloat || t == at::kHalf || t == at::kBFloat16;
  return op == ReduceOp::kAvg && floating && (size & (size - 1)) != 0;
}

// out /= n on stream s, in the tensor's dtype through ATen (fp32 arithmetic, one rounding).
void divide_on_stream(at::Tensor out, int n, cudaStream_t s, int device) {
#if defined(ZERO_TORCH_HAS_CUDA)
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromExternal(s, device));
  out.div_(n);
#else
  (void)out, (void)n, (void)s, (void)device;
  throw UsageError("NCCL kAvg at a world of " + std::to_string(n) +
                   ": dividing on the device needs a LibTorch built with CUDA");
#endif
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kAvg:
      return ncclAvg;
    case ReduceOp::kMax:
      return ncclMax;
  }
  return ncclSum;
}

class NcclCommunicator final : public Communicator {
 public:
  explicit NcclCommunicator(std::shared_ptr<NcclState> state) : state_(std::move(state)) {
    DeviceGuard guard(state_->device);
    ZERO_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    ZERO_CUDA_CHECK(cudaMalloc(&barrier_buf_, sizeof(float)));
    watchdog_ = std::thread([this] { watchdog_loop(); });
  }
  ~NcclCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      stop_ = true;
    }
    watch_cv_.notify_all();
    watchdog_.join();
    DeviceGuard guard(state_->device);
    // The stream drains within the timeout, or a peer is gone: then abort rather than hang.
    const auto deadline = std::chrono::steady_clock::now() + state_->timeout;
    bool drained = state_->broken_message().empty() && !state_->is_aborted();
    while (drained && cudaStreamQuery(stream_) == cudaErrorNotReady) {
      if (std::chrono::steady_clock::now() > deadline) {
        drained = false;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (drained) {
      std::lock_guard<std::mutex> lock(state_->comm_mutex);
      state_->aborted = true;  // nothing may touch the comm after its destruction either
      ncclCommDestroy(state_->comm);
    } else {
      state_->abort();
    }
    cudaFree(barrier_buf_);
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return state_->rank; }
  int world_size() const override { return state_->size; }
  Backend backend() const override { return Backend::kNccl; }

  WorkHandle all_reduce(at::Tensor& t, ReduceOp op) override {
    check(t, "all_reduce");
    const bool divide = avg_needs_division(op, t.scalar_type(), state_->size);
    const ncclRedOp_t nop = divide ? ncclSum : nccl_op(op);
    return issue(
        "all_reduce", t.nbytes(), {t},
        [&](ncclComm_t c, cudaStream_t s) {
          return ncclAllReduce(t.data_ptr(), t.data_ptr(), t.numel(),
                               nccl_dtype(t.scalar_type(), "all_reduce"), nop, c, s);
        },
        divide_after(divide, t));
  }
  WorkHandle reduce_scatter(const at::Tensor& in, at::Tensor& out, ReduceOp op,
                            InputUse /*NCCL keeps it either way*/ = InputUse::kKeep) override {
    check(in, "reduce_scatter"), check(out, "reduce_scatter");
    ZERO_CHECK(in.numel() == out.numel() * state_->size && in.scalar_type() == out.scalar_type(),
               UsageError,
               "reduce_scatter: input must hold world_size x output elements of the same dtype");
    const bool divide = avg_needs_division(op, in.scalar_type(), state_->size);
    const ncclRedOp_t nop = divide ? ncclSum : nccl_op(op);
    return issue(
        "reduce_scatter", in.nbytes(), {in, out},
        [&](ncclComm_t c, cudaStream_t s) {
          return ncclReduceScatter(in.data_ptr(), out.data_ptr(), out.numel(),
                                   nccl_dtype(in.scalar_type(), "reduce_scatter"), nop, c, s);
        },
        divide_after(divide, out));
  }
  WorkHandle reduce_scatter_v(const at::Tensor& in, at::Tensor& out,
                              const std::vector<int64_t>& counts, ReduceOp op,
                              InputUse /*NCCL keeps it either way*/ = InputUse::kKeep) override {
    check(in, "reduce_scatter_v"), check(out, "reduce_scatter_v");
    std::vector<int64_t> offsets =
        check_counts(counts, in.numel(), out.numel(), "reduce_scatter_v");
    const size_t es = in.element_size();
    const bool divide = avg_needs_division(op, in.scalar_type(), state_->size);
    const ncclRedOp_t nop = divide ? ncclSum : nccl_op(op);
    return issue(
        "reduce_scatter", in.nbytes(), {in, out},
        [&](ncclComm_t c, cudaStream_t s) {
          ncclResult_t r = ncclGroupStart();
          for (int k = 0; k < state_->size && r == ncclSuccess; ++k) {
            if (counts[k] == 0) continue;  // every rank skips the same roots
            r = ncclReduce(static_cast<char*>(in.data_ptr()) + offsets[k] * es, out.data_ptr(),
                           counts[k], nccl_dtype(in.scalar_type(), "reduce_scatter_v"), nop, k, c,
                           s);
          }
          ncclResult_t end = ncclGroupEnd();
          return r != ncclSuccess ? r : end;
        },
        divide_after(divide && out.numel() > 0, out));
  }
  WorkHandle all_gather(const at::Tensor& in, at::Tensor& out) override {
    check(in, "all_gather"), check(out, "all_gather");
    ZERO_CHECK(out.numel() == in.numel() * state_->size && in.scalar_type() == out.scalar_type(),
               UsageError,
               "all_gather: output must hold world_size x input elements of the same dtype");
    return issue("all_gather", out.nbytes(), {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), in.numel(),
                           nccl_dtype(in.scalar_type(), "all_gather"), c, s);
    });
  }
  WorkHandle all_gather_v(const at::Tensor& in, at::Tensor& out,
                          const std::vector<int64_t>& counts) override {
    check(in, "all_gather_v"), check(out, "all_gather_v");
    std::vector<int64_t> offsets = check_counts(counts, out.numel(), in.numel(), "all_gather_v");
    const size_t es = in.element_size();
    return issue("all_gather", out.nbytes(), {in, out}, [&](ncclComm_t c, cudaStream_t s) {
      ncclResult_t r = ncclGroupStart();
      for (int k = 0; k < state_->size && r == ncclSuccess; ++k) {
        if (counts[k] == 0) continue;
        char* dst = static_cast<char*>(out.data_ptr()) + offsets[k] * es;
        r = ncclBroadcast(k == state_->rank ? in.data_ptr() : dst, dst, counts[k],
                          nccl_dtype(in.scalar_type(), "all_gather_v"), k, c, s);
      }
      ncclResult_t end = ncclGroupEnd();
      return r != ncclSuccess ? r : end;
    });
  }
  WorkHandle broadcast(at::Tensor& t, int root) override {
    check(t, "broadcast");
    ZERO_CHECK(root >= 0 && root < state_->size, UsageError, "broadcast: root ", root,
               " outside the group");
    return issue("broadcast", t.nbytes(), {t}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), t.numel(),
                           nccl_dtype(t.scalar_type(), "broadcast"), root, c, s);
    });
  }
  WorkHandle barrier() override {
    return issue("barrier", sizeof(float), {}, [&](ncclComm_t c, cudaStream_t s) {
      return ncclAllReduce(barrier_buf_, barrier_buf_, 1, ncclFloat32, ncclSum, c, s);
    });
  }
  // NCCL orders each peer pair's sends and receives itself; one group call makes the batch's
  // ops progress together (no deadlock when two ranks list them in opposite orders).
  WorkHandle batch_p2p(std::vector<P2POp> ops) override {
    check_p2p_peers(ops, state_->rank, state_->size);
    std::vector<at::Tensor> tensors;
    for (const P2POp& o : ops) {
      check(o.tensor, "batch_p2p");
      tensors.push_back(o.tensor);
    }
    return issue(
        "batch_p2p", p2p_bytes(ops), tensors,
        [&](ncclComm_t c, cudaStream_t s) {
          ncclResult_t r = ncclGroupStart();
          for (size_t i = 0; i < ops.size() && r == ncclSuccess; ++i) {
            const P2POp& o = ops[i];
            if (o.tensor.numel() == 0) continue;  // both sides skip an empty message
            const ncclDataType_t type = nccl_dtype(o.tensor.scalar_type(), "batch_p2p");
            r = o.kind == P2POp::Kind::kSend
                    ? ncclSend(o.tensor.data_ptr(), o.tensor.numel(), type, o.peer, c, s)
                    : ncclRecv(o.tensor.data_ptr(), o.tensor.numel(), type, o.peer, c, s);
          }
          ncclResult_t end = ncclGroupEnd();
          return r != ncclSuccess ? r : end;
        },
        {}, describe_p2p(ops));
  }
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override {
    ZERO_CHECK(!ranks.empty(), UsageError, "new_group: empty rank list");
    auto it = std::find(ranks.begin(), ranks.end(), state_->rank);
    const int index = groups_created_++;
    DeviceGuard guard(state_->device);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t child = nullptr;
    const int color = it == ranks.end() ? NCCL_SPLIT_NOCOLOR : 0;
    const int key = it == ranks.end() ? 0 : static_cast<int>(it - ranks.begin());
    state_->check(state_->with_comm(
                      [&](ncclComm_t c) { return ncclCommSplit(c, color, key, &child, &config); }),
                  "ncclCommSplit");
    if (it == ranks.end()) return nullptr;
    ncclResult_t r = ncclInProgress;
    auto child_state = std::make_shared<NcclState>();
    child_state->comm = child;
    child_state->device = state_->device;
    child_state->name = state_->name + "/g" + std::to_string(index);
    child_state->rank = key;
    child_state->size = static_cast<int>(ranks.size());
    child_state->timeout = state_->timeout;
    ncclCommGetAsyncError(child, &r);
    child_state->check(r, "ncclCommSplit (child)");
    auto group = std::make_shared<NcclCommunicator>(child_state);
    group->set_comms_log(comms_log());
    return group;
  }

 private:
  using Enqueue = std::function<ncclResult_t(ncclComm_t, cudaStream_t)>;

  std::function<void(cudaStream_t)> divide_after(bool divide, const at::Tensor& out) const {
    if (!divide) return {};
    const int n = state_->size, device = state_->device;
    return [out, n, device](cudaStream_t s) { divide_on_stream(out, n, s, device); };
  }

  void check(const at::Tensor& t, const char* op) const {
    ZERO_CHECK(t.defined() && t.is_cuda() && t.get_device() == state_->device, UsageError, op,
               ": tensor must be on cuda:", state_->device, " (NCCL backend)");
    ZERO_CHECK(t.is_contiguous(), UsageError, op, ": tensor must be contiguous");
    nccl_dtype(t.scalar_type(), op);
  }
  std::vector<int64_t> check_counts(const std::vector<int64_t>& counts, int64_t total, int64_t mine,
                                    const char* op) const {
    ZERO_CHECK(static_cast<int>(counts.size()) == state_->size, UsageError, op, ": ", counts.size(),
               " counts for ", state_->size, " ranks");
    std::vector<int64_t> offsets(counts.size() + 1, 0);
    for (size_t k = 0; k < counts.size(); ++k) {
      ZERO_CHECK(counts[k] >= 0, UsageError, op, ": negative count");
      offsets[k + 1] = offsets[k] + counts[k];
    }
    ZERO_CHECK(offsets.back() == total && counts[state_->rank] == mine, UsageError, op,
               ": counts do not match the tensors (sum ", offsets.back(), " vs ", total, ", own ",
               counts[state_->rank], " vs ", mine, ")");
    return offsets;
  }

  // The one door: sequence number, stream ordering, enqueue, completion event, error context.
  // A point-to-point batch (`p2p`: its ops described) takes no sequence number: ranks exchange
  // different numbers of them.
  WorkHandle issue(const char* op, int64_t bytes, std::vector<at::Tensor> tensors,
                   const Enqueue& enqueue, const std::function<void(cudaStream_t)>& after = {},
                   const std::string& p2p = "") {
    {
      std::lock_guard<std::mutex> lock(state_->mutex);
      ZERO_CHECK(state_->broken.empty(), CommError, op,
                 ": the communicator is unusable after an earlier failure: ", state_->broken);
    }
    const std::string where =
        p2p.empty() ? str(op, " (seq ", ++seq_, ", ", bytes, " bytes)")
                    : str(op, " (", p2p, ", group rank ", state_->rank, " of ", state_->size, ")");
    DeviceGuard guard(state_->device);
    cudaStream_t caller = current_stream(state_->device);
    cudaEvent_t ready = nullptr, done = nullptr;
    ZERO_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    ZERO_CUDA_CHECK(cudaEventRecord(ready, caller));
    ZERO_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    ZERO_CUDA_CHECK(cudaEventDestroy(ready));
    NcclWork::Timing timing;
    if (auto log = comms_log(); log && log->wants(op)) {
      timing = {std::move(log), nullptr, op, bytes, state_->size, CommsLog::caller()};
      ZERO_CUDA_CHECK(cudaEventCreate(&timing.begin));
      ZERO_CUDA_CHECK(cudaEventRecord(timing.begin, stream_));
    }
    state_->check(state_->with_comm([&](ncclComm_t c) { return enqueue(c, stream_); }), where);
    if (after) after(stream_);
    ZERO_CUDA_CHECK(
        cudaEventCreateWithFlags(&done, timing.log ? cudaEventDefault : cudaEventDisableTiming));
    ZERO_CUDA_CHECK(cudaEventRecord(done, stream_));
#if defined(ZERO_TORCH_HAS_CUDA)
    for (const at::Tensor& t :
         tensors)  // the allocator must not reuse them before the stream is done
      c10::cuda::CUDACachingAllocator::recordStream(
          t.storage().data_ptr(), c10::cuda::getStreamFromExternal(stream_, state_->device));
#endif
    auto work = std::make_shared<NcclWork>(state_, where, done, std::move(tensors));
    if (timing.log) work->set_timing(std::move(timing));
    {
      std::lock_guard<std::mutex> lock(watch_mutex_);
      pending_.push_back(work);
    }
    return work;
  }

  void watchdog_loop() {
    std::unique_lock<std::mutex> lock(watch_mutex_);
    while (!stop_) {
      watch_cv_.wait_for(lock, std::chrono::milliseconds(100));
      pending_.erase(std::remove_if(pending_.begin(), pending_.end(),
                                    [&](const std::shared_ptr<NcclWork>& w) {
                                      try {
                                        DeviceGuard guard(state_->device);
                                        return w->poll();
                                      } catch (const std::exception& e) {
                                        w->fail_polling(e.what());
                                        return true;
                                      }
                                    }),
                     pending_.end());
      const std::string broken = state_->broken_message();
      if (!broken.empty() && !state_->is_aborted()) {
        for (const auto& w : pending_) w->fail_unfinished(broken);
        state_->abort();  // unblocks kernels stuck waiting for absent peers
      }
    }
  }

  std::shared_ptr<NcclState> state_;
  cudaStream_t stream_ = nullptr;
  void* barrier_buf_ = nullptr;
  uint64_t seq_ = 0;
  int groups_created_ = 0;
  std::mutex watch_mutex_;
  std::condition_variable watch_cv_;
  std::deque<std::shared_ptr<NcclWork>> pending_;
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace

std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<KvStore> store,
                                                     const std::string& name, int rank, int size,
                                                     std::chrono::milliseconds timeout,
                                                     int device) {
  int devices = 0;
  ZERO_CUDA_CHECK(cudaGetDeviceCount(&devices));
  ZERO_CHECK(device >= 0 && device < devices, UsageError, "NCCL backend: device ", device, " but ",
             devices, " CUDA devices are visible");
  DeviceGuard guard(device);
  ncclUniqueId id;
  const std::string key = name + "/unique_id";
  if (rank == 0) {
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
      throw CommError(
          str("ncclGetUniqueId failed: ", ncclGetErrorString(r), " [", nccl_version(), "]"));
    const auto* p = reinterpret_cast<const uint8_t*>(&id);
    store->set(key, std::vector<uint8_t>(p, p + sizeof(id)));
  } else {
    store->wait({key}, timeout);
    std::vector<uint8_t> v = store->get(key);
    ZERO_ASSERT(v.size() == sizeof(id), "NCCL unique id of ", v.size(), " bytes");
    std::copy(v.begin(), v.end(), reinterpret_cast<uint8_t*>(&id));
  }
  auto state = std::make_shared<NcclState>();
  state->device = device;
  state->name = name;
  state->rank = rank;
  state->size = size;
  state->timeout = timeout;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // init and collectives poll, so a missing rank ends in a timeout
  ncclResult_t r = ncclCommInitRankConfig(&state->comm, size, id, rank, &config);
  try {
    state->check(r, "ncclCommInitRankConfig");
  } catch (...) {
    if (state->comm) ncclCommAbort(state->comm);
    throw;
  }
  return std::make_shared<NcclCommunicator>(state);
}

}  // namespace zero::detail
