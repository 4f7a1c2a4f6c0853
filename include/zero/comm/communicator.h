// The Communicator interface every layer above comm/ uses, and its work handle.
// Backends: Gloo (CPU tensors, TCP) and NCCL (CUDA tensors). Every collective of a backend
// passes through one private function of that backend, which assigns the sequence number,
// applies the timeout and turns failures into CommError / TimeoutError with context.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace zero {

class CommsLog;

enum class ReduceOp { kSum, kAvg, kMax };
enum class Backend { kGloo, kNccl };
// What a reduce-scatter may do to its input. kConsume lets the backend use the input as the
// reduction's workspace (its contents are unspecified afterwards): Gloo's ring then needs no
// receive buffers of a chunk's size, only a few 1 MiB segments. kKeep leaves the input as it
// was; on Gloo that costs a copy of it. NCCL keeps the input either way.
enum class InputUse { kKeep, kConsume };
// How the Gloo backend's groups move their bytes: kAuto takes shared memory for a group whose ranks
// share a host and TCP otherwise; kShm insists on shared memory (a group that cannot have it is
// an error); kTcp is Gloo's TCP always.
enum class Transport { kAuto, kShm, kTcp };

const char* to_string(ReduceOp op);
const char* to_string(Backend backend);
const char* to_string(Transport transport);

// A handle on one issued collective.
// Gloo: the collective runs on the communicator's worker thread; wait() blocks the host
// until it finished (or failed, or timed out) and rethrows its error.
// NCCL: the collective is enqueued on the communicator's stream; wait() makes the caller's
// current CUDA stream wait for it (an event), blocking the host only to surface errors.
class Work {
 public:
  virtual ~Work() = default;
  // Blocks as described above; throws CommError / TimeoutError. Safe to call twice.
  virtual void wait() = 0;
  // Blocks the host until the collective finished on its device (a timing fence: on NCCL,
  // wait() alone leaves the work queued). Throws like wait(). Gloo: wait().
  virtual void synchronize() { wait(); }
  // Non-blocking: true once the collective finished, successfully or not.
  virtual bool is_completed() = 0;
  // The failure of a completed collective, or nullptr.
  virtual std::exception_ptr error() = 0;
};
using WorkHandle = std::shared_ptr<Work>;

// One transfer of a point-to-point batch: send `tensor` to rank `peer`, or receive into it from
// `peer` (as many bytes as the matching send has).
struct P2POp {
  enum class Kind { kSend, kRecv };
  Kind kind = Kind::kSend;
  at::Tensor tensor;
  int peer = 0;
};
const char* to_string(P2POp::Kind kind);

// All tensors are flat (contiguous, any shape; only numel counts) and live on the device
// the backend serves. Supported dtypes: float32, float16, bfloat16, int8 (qwZ's quantized
// weights; a sum wraps around), int32, int64.
class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual Backend backend() const = 0;
  // How its collectives move bytes: "shm" (shared memory, ranks of one host), "tcp" (Gloo's
  // TCP pairs), "self" (a Gloo group of one rank), "nccl".
  virtual const char* transport() const { return to_string(backend()); }
  // Memory that every rank of this group maps, the same bytes for all: `numel` zero-filled
  // elements of `dtype`, freed when the last rank drops its tensor. Only where the ranks share a
  // host and the group runs on shared memory; an undefined tensor elsewhere (every rank of a
  // group gets the same answer). Collective. What one rank writes, the others read: the callers
  // order writes and reads with the group's collectives.
  virtual at::Tensor host_shared_tensor(int64_t numel, at::ScalarType dtype) { return {}; }

  // In place: every rank ends with op over all ranks' `tensor`. kAvg divides after summing
  // (rounded once to the dtype; integers truncate toward zero).
  virtual WorkHandle all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  // input.numel() == world_size * output.numel(); rank r receives op over chunk r.
  virtual WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                                    InputUse use = InputUse::kKeep) = 0;
  // Uneven shards: input.numel() == sum(counts); rank r receives counts[r] elements,
  // the reduction of input[offset_r, offset_r + counts[r]). counts[r] may be 0.
  virtual WorkHandle reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                                      const std::vector<int64_t>& counts, ReduceOp op,
                                      InputUse use = InputUse::kKeep) = 0;
  // output.numel() == world_size * input.numel(); rank r's input lands in chunk r.
  virtual WorkHandle all_gather(const at::Tensor& input, at::Tensor& output) = 0;
  // Uneven: input.numel() == counts[rank]; output.numel() == sum(counts).
  virtual WorkHandle all_gather_v(const at::Tensor& input, at::Tensor& output,
                                  const std::vector<int64_t>& counts) = 0;
  // In place: every rank ends with root's `tensor`.
  virtual WorkHandle broadcast(at::Tensor& tensor, int root) = 0;
  virtual WorkHandle barrier() = 0;

  // Point-to-point (between pipeline stages); not collective: only the ranks named take part.
  // The ops of one batch run together, every receive posted before any send, so two ranks whose
  // batches list a send and a receive in opposite orders do not deadlock. The n-th send from a to
  // b lands in b's n-th receive from a. Point-to-point ops take no collective sequence number
  // (ranks exchange different numbers of them) but run in issue order with the collectives: a
  // later collective waits for the batch. A peer out of range or this rank itself is a
  // UsageError; a timeout names the peer and direction that did not complete.
  virtual WorkHandle batch_p2p(std::vector<P2POp> ops) = 0;
  WorkHandle send(const at::Tensor& tensor, int dst);  // a batch of one
  WorkHandle recv(at::Tensor& tensor, int src);        // a batch of one

  // Sub-groups. Collective over all ranks of this communicator (every rank calls it with the
  // same `ranks`, in the same order relative to other new_group calls); returns nullptr on ranks
  // not in `ranks`. Ranks are of this communicator; the new group's rank i is ranks[i]. Blocks
  // until the group is connected (TimeoutError otherwise). Call it from the issuing thread.
  virtual std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) = 0;

  // comms_logger: while a log is set, the backend's collective door records every collective
  // of this communicator into it when it completes (nullptr: none, the default).
  void set_comms_log(std::shared_ptr<CommsLog> log);
  std::shared_ptr<CommsLog> comms_log() const;

 private:
  mutable std::mutex log_mutex_;
  std::shared_ptr<CommsLog> comms_log_;
};

}  // namespace zero
