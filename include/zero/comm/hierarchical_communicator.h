// A data-parallel communicator whose large all-reduces, reduce-scatters and all-gathers run
// hierarchically (within the host, across the hosts: host_topology.h), and with qgZ its
// reduce-scatters quantized, everything else on the flat communicator. The hierarchical ones run in
// order on one thread of their own, so every rank issues the node and cross-node groups'
// collectives in the same order; each returns a Work that completes when its steps have.
#pragma once

#include <zero/comm/host_topology.h>

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace zero {

class HierarchicalCommunicator : public Communicator {
 public:
  // Collectives of at least `min_bytes` (the whole buffer) go hierarchical over `groups` (made
  // from `flat`). quantized_block > 0 (ZeRO++ qgZ): every summing or averaging reduce-scatter of
  // floating-point values, whatever its size, goes through quantized_hierarchical_reduce_scatter_v
  // with blocks of that many values.
  // gather_min_bytes >= 0: all-gathers go hierarchical from that size instead (MiCS's
  // mics_hierarchical_params_gather: every size).
  HierarchicalCommunicator(std::shared_ptr<Communicator> flat, HostGroups groups, int64_t min_bytes,
                           int64_t quantized_block = 0, int64_t gather_min_bytes = -1);
  ~HierarchicalCommunicator() override;  // finishes the queued all-reduces, then stops

  int rank() const override { return flat_->rank(); }
  int world_size() const override { return flat_->world_size(); }
  Backend backend() const override { return flat_->backend(); }
  const char* transport() const override { return flat_->transport(); }
  at::Tensor host_shared_tensor(int64_t numel, at::ScalarType dtype) override {
    return flat_->host_shared_tensor(numel, dtype);
  }
  WorkHandle all_reduce(at::Tensor& tensor, ReduceOp op) override;
  WorkHandle reduce_scatter(const at::Tensor& input, at::Tensor& output, ReduceOp op,
                            InputUse use) override;
  WorkHandle reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                              const std::vector<int64_t>& counts, ReduceOp op,
                              InputUse use) override;
  WorkHandle all_gather(const at::Tensor& input, at::Tensor& output) override;
  WorkHandle all_gather_v(const at::Tensor& input, at::Tensor& output,
                          const std::vector<int64_t>& counts) override;
  WorkHandle broadcast(at::Tensor& tensor, int root) override {
    return flat_->broadcast(tensor, root);
  }
  WorkHandle barrier() override { return flat_->barrier(); }
  WorkHandle batch_p2p(std::vector<P2POp> ops) override { return flat_->batch_p2p(std::move(ops)); }
  std::shared_ptr<Communicator> new_group(const std::vector<int>& ranks) override {
    return flat_->new_group(ranks);
  }

  // qgZ's reduce-scatter with `exact` (quantized_hierarchical_reduce_scatter_v) whatever
  // quantized_block() says (> 0 needed).
  WorkHandle quantized_reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                                        const std::vector<int64_t>& counts, ReduceOp op,
                                        const at::Tensor& exact);
  const HostGroups& groups() const { return groups_; }
  int64_t quantized_block() const { return quantized_block_; }  // 0: qgZ off
  // The communicators that record what runs (the flat one and the two groups).
  std::vector<Communicator*> members() const;

 private:
  struct Job;
  WorkHandle enqueue(std::function<void()> body);
  void run();

  std::shared_ptr<Communicator> flat_;
  HostGroups groups_;
  int64_t min_bytes_;
  int64_t gather_min_bytes_;
  int64_t quantized_block_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace zero
