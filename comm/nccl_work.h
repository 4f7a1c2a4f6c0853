// The NCCL backend's failure state and work handles: NcclState (the comm, its first failure,
// the one abort) and NcclWork (a collective in flight: its event, its deadline, its tensors),
// shared by the communicator in nccl_communicator.cpp and its watchdog. Internal to comm/.
#pragma once

#include <zero/comm/communicator.h>
#include <zero/comm/comms_log.h>
#include <zero/error.h>

#include <cuda_runtime.h>
#include <nccl.h>

#if defined(ZERO_TORCH_HAS_CUDA)
#include <c10/cuda/CUDAStream.h>
#endif

#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace zero::detail {

inline std::string nccl_version() {
  int v = 0;
  ncclGetVersion(&v);
  return str("NCCL ", v / 10000, ".", (v / 100) % 100, ".", v % 100);
}

#define ZERO_CUDA_CHECK(call)                                                                      \
  do {                                                                                             \
    cudaError_t zero_err_ = (call);                                                                \
    if (zero_err_ != cudaSuccess)                                                                  \
      throw ::zero::CudaError(::zero::detail::str(                                                 \
          #call, " failed: ", cudaGetErrorString(zero_err_), " (", __FILE__, ":", __LINE__, ")")); \
  } while (0)

// Compat: the caller's current stream. LibTorch without CUDA has no stream API: legacy default.
inline cudaStream_t current_stream(int device) {
#if defined(ZERO_TORCH_HAS_CUDA)
  return c10::cuda::getCurrentCUDAStream(device).stream();
#else
  (void)device;
  return nullptr;
#endif
}

struct DeviceGuard {
  int previous = -1;
  explicit DeviceGuard(int device) {
    ZERO_CUDA_CHECK(cudaGetDevice(&previous));
    if (previous != device) ZERO_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() {
    if (previous >= 0) cudaSetDevice(previous);
  }
};

// Shared by a communicator and its work handles: the comm, its failure state.
struct NcclState {
  ncclComm_t comm = nullptr;
  int device = 0;
  std::string name;
  int rank = 0, size = 1;
  std::chrono::milliseconds timeout{600000};
  std::mutex mutex;
  std::string broken;  // first failure; later calls fail fast
  // ncclCommAbort frees the comm: it happens once (abort()), and every later use of `comm`
  // goes through with_comm(), which sees the flag first. comm_mutex orders the two.
  std::mutex comm_mutex;
  bool aborted = false;

  // Runs f(comm) unless the comm was aborted (then returns ncclInvalidUsage untouched).
  template <class F>
  ncclResult_t with_comm(F&& f) {
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (aborted) return ncclInvalidUsage;
    return f(comm);
  }
  ncclResult_t async_error() {
    ncclResult_t r = ncclSuccess;
    const ncclResult_t q = with_comm([&](ncclComm_t c) { return ncclCommGetAsyncError(c, &r); });
    return q != ncclSuccess ? q : r;
  }
  bool is_aborted() {
    std::lock_guard<std::mutex> lock(comm_mutex);
    return aborted;
  }
  // Frees the comm, once; unblocks kernels waiting for absent peers.
  void abort() {
    std::lock_guard<std::mutex> lock(comm_mutex);
    if (aborted) return;
    aborted = true;
    ncclCommAbort(comm);
  }
  std::string broken_message() {
    std::lock_guard<std::mutex> lock(mutex);
    return broken;
  }

  // Checks an NCCL result; ncclInProgress (non-blocking comm) is polled until done or deadline.
  void check(ncclResult_t r, const std::string& what) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (r == ncclInProgress) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail(str(what, " did not complete within ", timeout.count(), " ms"), true);
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      r = async_error();
    }
    if (r != ncclSuccess) {
      std::string last = "the communicator was aborted";
      with_comm([&](ncclComm_t c) {
        last = ncclGetLastError(c);
        return ncclSuccess;
      });
      fail(str(what, " failed: ", ncclGetErrorString(r), " (", last, ")"), false);
    }
  }
  [[noreturn]] void fail(const std::string& msg, bool timed_out) {
    const std::string full =
        str("group '", name, "' rank ", rank, " of ", size, ": ", msg, " [", nccl_version(), "]");
    {
      std::lock_guard<std::mutex> lock(mutex);
      if (broken.empty()) broken = full;
    }
    if (timed_out) throw TimeoutError(full);
    throw CommError(full);
  }
};

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclState> state, std::string where, cudaEvent_t done,
           std::vector<at::Tensor> tensors)
      : state_(std::move(state)),
        where_(std::move(where)),
        done_(done),
        tensors_(std::move(tensors)),
        start_(std::chrono::steady_clock::now()) {}
  ~NcclWork() override {
    if (done_) cudaEventDestroy(done_);
    if (timing_.begin) cudaEventDestroy(timing_.begin);
  }
  // comms_logger: `begin` (a timing event recorded on the stream before the collective) and
  // `done` time it; the latency is recorded when poll() first sees it finished.
  struct Timing {
    std::shared_ptr<CommsLog> log;
    cudaEvent_t begin = nullptr;
    const char* op = "";
    int64_t bytes = 0;
    int world = 1;
    const char* caller = "";
  };
  void set_timing(Timing timing) { timing_ = std::move(timing); }
  // Orders the caller's current stream after the collective; blocks the host only to surface
  // errors.
  void wait() override {
    if (auto e = error()) std::rethrow_exception(e);
    DeviceGuard guard(state_->device);
    ZERO_CUDA_CHECK(cudaStreamWaitEvent(current_stream(state_->device), done_, 0));
    release_tensors();
  }
  // Blocks the host until the collective is done on the device (or failed, or timed out).
  void synchronize() override {
    DeviceGuard guard(state_->device);
    while (!poll()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    if (auto e = error()) std::rethrow_exception(e);
  }
  // The watchdog is aborting the comm: a collective not yet seen finished cannot be trusted
  // (its kernels exit on abort and `done` fires over whatever the buffers hold).
  void fail_unfinished(const std::string& broken) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    error_ = std::make_exception_ptr(
        CommError(str(where_, " did not finish before the communicator was aborted: ", broken)));
    finished_ = true;  // tensors stay referenced: the aborted kernel may still touch them
  }
  // The watchdog could not poll this work (a device error): whoever waits on it gets the error.
  void fail_polling(const std::string& why) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return;
    error_ = std::make_exception_ptr(CommError(
        str(where_, ": the watchdog could not poll it: ", why, " (rank ", state_->rank, ")")));
    finished_ = true;  // tensors stay referenced: the kernel may still touch them
  }
  bool is_completed() override { return poll(); }
  std::exception_ptr error() override {
    poll();
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  // Called by is_completed/error and the watchdog: true once finished or failed.
  bool poll() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (finished_) return true;
    cudaError_t q = cudaEventQuery(done_);
    if (q == cudaSuccess && state_->is_aborted()) {
      // Not seen finished before the abort (fail_unfinished marks those it knows of first).
      error_ = std::make_exception_ptr(CommError(
          str(where_,
              " did not finish before the communicator was aborted: ", state_->broken_message())));
      finished_ = true;
      return true;
    }
    if (q == cudaSuccess) {
      finished_ = true;
      tensors_.clear();
      float ms = 0;
      if (timing_.log && cudaEventElapsedTime(&ms, timing_.begin, done_) == cudaSuccess)
        timing_.log->record(timing_.op, timing_.bytes, timing_.world, ms, timing_.caller);
      return true;
    }
    const ncclResult_t async = state_->async_error();
    std::string msg;
    bool timed_out = false;
    if (q != cudaErrorNotReady) {
      msg = str(where_, " failed: ", cudaGetErrorString(q));
    } else if (async != ncclSuccess && async != ncclInProgress) {
      msg = str(where_, " failed: ", ncclGetErrorString(async));
    } else if (state_->is_aborted()) {
      msg = str(where_, " did not finish before the communicator was aborted");
    } else if (std::chrono::steady_clock::now() - start_ > state_->timeout) {
      msg = str(where_, " timed out after ", state_->timeout.count(), " ms");
      timed_out = true;
    } else {
      return false;
    }
    try {
      state_->fail(msg, timed_out);
    } catch (...) {
      error_ = std::current_exception();
    }
    finished_ = true;  // tensors stay referenced: the aborted kernel may still touch them
    return true;
  }

 private:
  // After wait() the caller's stream is ordered after the collective, and recordStream (in
  // issue()) keeps the caching allocator from reusing the memory before the NCCL stream is
  // done: the references can go now, so a freed buffer is reusable at once. Without LibTorch's
  // CUDA allocator nothing else guards them: they stay until the watchdog sees `done`.
  void release_tensors() {
#if defined(ZERO_TORCH_HAS_CUDA)
    std::lock_guard<std::mutex> lock(mutex_);
    if (!error_) tensors_.clear();
#endif
  }

  std::shared_ptr<NcclState> state_;
  std::string where_;
  cudaEvent_t done_;
  std::vector<at::Tensor> tensors_;
  std::chrono::steady_clock::time_point start_;
  Timing timing_;
  std::mutex mutex_;
  bool finished_ = false;
  std::exception_ptr error_;
};

}  // namespace zero::detail
