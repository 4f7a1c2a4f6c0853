// Where stage 3 keeps this rank's parameter shards between uses when they are offloaded
// (DeepSpeed's zero_optimization.offload_param): host memory or swap files on NVMe. The stage
// copies a shard out of the store into a device buffer for each gather; the offloaded optimizer
// writes the updated values into the store, one sub-group at a time.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <vector>

namespace zero {

// Bytes a ParamStore holds, by place.
struct ParamStoreMemory {
  int64_t host_params_bytes = 0;   // shards resident in host memory
  int64_t host_buffers_bytes = 0;  // swap-in / swap-out buffers
  int64_t nvme_bytes = 0;          // the swap file
};

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  // Lays out the shards: group_numels[g] elements of dtype for layout group g (0: a group the
  // store does not hold). Called once, before anything else; the contents are undefined until
  // written.
  virtual void init(const std::vector<int64_t>& group_numels, c10::ScalarType dtype) = 0;
  // Group g's shard as a contiguous host tensor (blocking until it is in memory), valid until
  // release(g). One group may be acquired at a time per caller; acquire(g) twice is an error.
  virtual at::Tensor acquire(int group) = 0;
  virtual void release(int group) = 0;
  // A hint that group g will be acquired soon: a swapping store starts reading it into a free
  // buffer, if it has one. Never blocks.
  virtual void prefetch(int group) {}
  // Writes `values` (host, contiguous, the store's dtype) into elements [begin, begin + numel)
  // of group g's shard. Within one pass the writes of a group come in ascending order with
  // `begin` a multiple of write_align_numel() (the last one may end anywhere).
  virtual void write(int group, int64_t begin, const at::Tensor& values) = 0;
  // Returns once every write issued so far is stored (a following acquire reads it).
  virtual void flush() = 0;
  // The element multiple a sub-group's start must have for write() (O_DIRECT alignment on NVMe).
  virtual int64_t write_align_numel() const { return 1; }
  virtual c10::ScalarType dtype() const = 0;
  virtual ParamStoreMemory memory() const = 0;
  virtual const char* location() const = 0;  // "cpu" or "nvme"
};

}  // namespace zero
