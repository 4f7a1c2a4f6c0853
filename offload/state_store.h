// Where an offloaded optimizer keeps the fp32 master and Adam moments of its shards: a
// StateStore hands them out one sub-group at a time, in order, so that an NVMe store can read
// the next sub-group and write the previous one while Adam runs on the current one.
#pragma once

#include <zero/core/optimizer.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace zero::offload {

// Elements [begin, begin + numel) of shard `shard` (DeepSpeed's sub_group_size pieces).
struct SubGroup {
  size_t shard = 0;
  int64_t begin = 0;
  int64_t numel = 0;
};

constexpr int64_t kSubGroupAlignNumel = 64;

// Each shard cut into pieces of at most sub_group_numel elements (rounded up to a multiple of
// align_numel, itself a multiple of kSubGroupAlignNumel), shard by shard.
std::vector<SubGroup> split_sub_groups(const std::vector<int64_t>& shard_numels,
                                       int64_t sub_group_numel,
                                       int64_t align_numel = kSubGroupAlignNumel);

// One sub-group's fp32 state while Adam runs on it (host tensors, contiguous, numel each).
struct SubGroupState {
  at::Tensor master, exp_avg, exp_avg_sq;
};

class StateStore {
 public:
  virtual ~StateStore() = default;
  // Allocates the state of every sub-group: masters filled by fill(k, master) (fp32 host tensor
  // of sub-group k's numel), moments zero.
  virtual void init(const std::vector<int64_t>& shard_numels,
                    const std::vector<SubGroup>& sub_groups,
                    const std::function<void(size_t k, const at::Tensor& master)>& fill) = 0;
  // A pass over the sub-groups in order 0..K-1: begin(k) returns k's state (blocking until it
  // is in memory), end(k) says Adam is done with it; finish() returns once all is stored.
  virtual SubGroupState begin(size_t k) = 0;
  virtual void end(size_t k) = 0;
  virtual void finish() = 0;
  // The whole state of one shard as host tensors that stay valid until the next pass (a
  // checkpoint reads or fills them); after filling, commit() stores them back.
  virtual SubGroupState shard_state(size_t shard) = 0;
  virtual void commit() = 0;
  virtual OffloadMemory memory() const = 0;
  virtual const char* location() const = 0;
};

// Host memory: one master and two moment tensors per shard, pinned when asked.
std::unique_ptr<StateStore> make_host_store(bool pin_memory);

}  // namespace zero::offload
