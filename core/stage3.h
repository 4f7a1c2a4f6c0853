// Stage 3: parameters partitioned too. Each unit (a wrapped block, or the rest of the model)
// has one state (released / gathering / available) in this table; gathers follow the unit
// protocol of the Sharded wrapper and prefetch along the order recorded in the first pass,
// and a unit reused within stage3_max_reuse_distance elements stays gathered after its use.
#pragma once

#include "flat_stage.h"
#include "quantized_gather.h"

#include <deque>
#include <string>
#include <vector>

namespace zero::detail {

enum class UnitState { kReleased, kGathering, kAvailable };
const char* to_string(UnitState state);

class Stage3 : public FlatStage {
 public:
  Stage3(const StageOptions& options, std::vector<at::Tensor> params, FlatLayout layout,
         std::shared_ptr<Communicator> comm, std::vector<UnitSpec> units,
         std::vector<at::Tensor> param_shards = {});
  // Released parameters become empty tensors, so later use fails with a shape error instead
  // of reading freed memory (call Engine::full_parameters() first to keep the values).
  ~Stage3() override;

  int stage() const override { return 3; }
  std::vector<OptimizerShard> optimizer_shards() override;
  bool shards_replicated() const override { return false; }
  void publish_parameters() override;
  void start_backward(bool boundary) override;
  void finish_backward() override;
  void pre_forward(int unit) override;
  void post_forward(int unit) override;
  void pre_backward(int unit) override;
  void gather_all() override;
  void release_all() override;
  void hold_gathered(bool hold) override;
  void zero_grad() override;
  StageMemory memory() const override;

 private:
  // offload_param with the optimizer on the device: the updated masters into the store.
  void write_masters_to_store();
  struct Unit {
    std::string name;
    std::vector<int> groups;  // non-persistent layout groups of this unit
    int64_t numel = 0;        // gathered numel (padded)
    int64_t bytes = 0;
    UnitState state = UnitState::kReleased;
    std::vector<WorkHandle> works;           // in flight while kGathering
    std::vector<QuantizedGather> quantized;  // qwZ: in flight while kGathering
    bool quantized_values = false;           // gathered through qwZ (not the exact values)
    int expected_grads = 0;
    int arrived_grads = 0;
    bool kept = false;       // kAvailable only because it is reused soon; evicted under pressure
    bool secondary = false;  // hpZ: its secondary slices are kept (and current)
    bool secondary_quantized = false;  // they were cut from values gathered through qwZ
  };

  void after_grad(int param) override;
  // offload_param: the sharded groups' shards go into the store; param_shard is then only the
  // device buffer of a gather in flight.
  void move_shards_to_store();
  // kReleased -> kGathering (async all-gathers issued); `exact`: never quantized (qwZ).
  void start_gather(int unit, bool exact = false);
  void finish_gather(int unit);  // -> kAvailable; idempotent; blocks until the data is there
  void release(int unit);        // -> kReleased; frees the gathered storage
  void prefetch(const std::vector<int>& candidates, int current);
  // Whether `unit`, used at position `pos` of step_trace_, is used again before more than
  // max_reuse_distance elements of other units are (DeepSpeed's count); the backward part
  // counts only while autograd records.
  bool reused_soon(int unit, size_t pos) const;
  // Releases kept units until `numel` more elements fit under max_live_numel (or none is left).
  void evict_kept(int64_t numel);

  std::vector<Unit> units_;
  std::vector<int> trace_;       // unit order of the recorded forward pass
  std::vector<int> step_trace_;  // trace_ and then its reverse (the backward pass)
  std::vector<int> recording_;   // the pass being recorded
  bool trace_valid_ = false;
  size_t trace_pos_ = 0;     // forward: the next position in trace_
  size_t backward_pos_ = 0;  // backward: the next position in step_trace_
  bool boundary_ = true;
  bool in_backward_ = false;  // between start_backward and finish_backward
  int64_t live_numel_ = 0;    // gathered or gathering, kept units included
  int64_t gathers_ = 0;       // start_gather transitions so far
  bool warned_live_ = false;
  bool held_ = false;  // hold_gathered: every unit stays gathered
  // offload_param: device buffers the shards are copied into for their gathers, reused (a buffer
  // is free again when no gather holds it). Allocating one per gather made glibc keep freed
  // buffers of that size in its heap, up to tens of MiB per rank.
  std::vector<at::Tensor> shard_buffers_;
  at::Tensor shard_buffer(int64_t numel, const at::TensorOptions& options);
  // The memory of released CPU units, kept for the next gather of the same byte size: a model's
  // blocks are mostly of one size, so the gather of the next block takes what the last one
  // released and a step in steady state allocates nothing (glibc would often hand large freed
  // blocks back to the kernel and fault them in again, page by page). At most two of the largest
  // blocks and the rest of the model are kept; on a GPU the caching allocator does this already.
  struct ParkedStorage {
    int64_t nbytes = 0;
    at::DataPtr data;
  };
  std::deque<ParkedStorage> parked_;  // oldest first
  int64_t parked_bytes_ = 0;
  int64_t park_limit_bytes_ = 0;
  void release_storage(const at::Tensor& flat);
  void gather_storage(const at::Tensor& flat, int64_t nbytes);
  // hpZ: this rank's slice over the secondary group of a gathered unit's groups, kept at its
  // release; dropped (after the gathers reading them) when the parameters may change.
  void keep_secondary(Unit& u);
  void drop_secondaries();
  std::vector<at::Tensor> secondary_shards_;  // per layout group
  bool keep_secondaries_ = false;
  int64_t secondary_gathers_ = 0;
};

}  // namespace zero::detail
