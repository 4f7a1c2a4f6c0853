// The Gloo backend (CPU tensors over TCP): one gloo context per group, one worker thread that
// runs the collectives in issue order, and one private issue() every collective goes through.
#pragma once

#include <zero/comm/communicator.h>

#include "kv_store.h"
#include "p2p.h"
#include "shm_group.h"

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace gloo {
class Context;
namespace transport {
class Device;
}
}  // namespace gloo

namespace zero::detail {

struct GlooGroupSpec {
  std::shared_ptr<KvStore> store;
  std::shared_ptr<gloo::transport::Device> device;
  std::string name;  // store key prefix, unique per group: "zero/world", "zero/world/g0", ...
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{600000};
  Transport transport = Transport::kAuto;  // the group's sub-groups inherit it
  int64_t shm_slot_bytes = 1 << 20;        // per rank and slot (two each) of a shared-memory group
};

// Reduce-scatter as a pipelined ring over Gloo unbound buffers: every rank sends and receives
// (N-1)/N of the data. counts[r] elements (may be 0) land on rank r. The partial sums are
// formed in `input` itself (kConsume) or in a copy of it in `scratch` (kKeep); `scratch` also
// holds a few segment-sized receive buffers, and is grown as needed and reused across calls.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, void* input, void* output,
                         const std::vector<int64_t>& counts, size_t element_bytes,
                         void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                         std::chrono::milliseconds timeout, InputUse use,
                         std::vector<char>& scratch);

// Runs one batch (gloo_p2p.cpp): receives posted first, then sends, then every one waited for
// until `timeout`; a TimeoutError names `where`, the peer, the direction and the message.
void gloo_p2p(const std::shared_ptr<gloo::Context>& context, const std::vector<P2PTransfer>& ops,
              std::chrono::milliseconds timeout, const std::string& where);

// The Gloo backend's group. Its collectives go through a shared-memory segment (shm_group.h) when
// every rank runs on one host (host_key()) and the transport allows it, else over Gloo's TCP
// pairs; point-to-point batches likewise.
class GlooCommunicator final : public Communicator {
 public:
  // Connects the full mesh of the group, then agrees on the transport (blocks; TimeoutError
  // names ranks that never came).
  explicit GlooCommunicator(GlooGroupSpec spec);
  ~GlooCommunicator() override;

  int rank() const override { return spec_.rank; }
  int world_size() const override { return spec_.size; }
  Backend backend() const override { return Backend::kGloo; }
  const char* transport() const override { return shm_ ? "shm" : spec_.size == 1 ? "self" : "tcp"; }
  at::Tensor host_shared_tensor(int64_t numel, at::ScalarType dtype) override;

  WorkHandle all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                            InputUse use = InputUse::kKeep) override;
  WorkHandle reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                              const std::vector<int64_t>& counts, ReduceOp op,
                              InputUse use = InputUse::kKeep) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle all_gather_v(const at::Tensor& input, at::Tensor& output,
                          const std::vector<int64_t>& counts) override;
  WorkHandle broadcast(at::Tensor& tensor, int root) override;
  WorkHandle barrier() override;
  WorkHandle batch_p2p(std::vector<P2POp> ops) override;
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override;

 private:
  struct Task;
  using Body = std::function<void(uint32_t tag)>;

  // The one door: assigns the sequence number, queues `body` for the worker thread, which
  // publishes this rank's arrival, runs it under the timeout and wraps any failure. A
  // point-to-point batch (`p2p`: its ops described) takes no sequence number and no arrival.
  WorkHandle issue(const char* op, int64_t bytes, std::vector<at::Tensor> tensors, Body body,
                   std::string p2p = "");
  // Makes shm_ when the group shares a host and the transport allows it (collective, over the
  // Gloo mesh). Throws CommError if Transport::kShm cannot be had.
  void setup_shared_memory();
  void worker_loop();
  void reporter_loop();
  void run(Task& task);
  std::string missing_ranks(uint64_t seq);
  std::string arrival_key(int rank) const;

  GlooGroupSpec spec_;
  std::shared_ptr<gloo::Context> context_;
  std::unique_ptr<ShmGroup> shm_;  // null: TCP
  std::vector<char> scratch_;      // worker thread only
  // Point-to-point messages numbered per peer and direction (worker thread only).
  std::vector<uint32_t> sent_to_, received_from_;

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Task>> queue_;
  bool stop_ = false;
  uint64_t next_seq_ = 1;  // guarded by mutex_
  std::string broken_;     // first failure; later collectives fail fast (worker thread only)
  std::vector<at::Tensor> graveyard_;  // tensors of failed ops: Gloo may still write into them
  int groups_created_ = 0;

  std::atomic<uint64_t> arrived_seq_{0};  // published to the store by the reporter thread
  std::atomic<bool> reporter_idle_{false};
  std::mutex report_mutex_;
  std::condition_variable report_cv_;
  bool report_stop_ = false;

  std::thread worker_;
  std::thread reporter_;
};

}  // namespace zero::detail
