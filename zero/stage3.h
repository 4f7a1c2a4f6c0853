// Stage 3: parameters partitioned too. Each unit (a wrapped block, or the rest of the model)
// has one state (released / gathering / available) in this table; gathers follow the unit
// protocol of the Sharded wrapper and prefetch along the order recorded in the first pass.
#pragma once

#include "flat_stage.h"

#include <string>
#include <vector>

namespace zero::detail {

enum class UnitState { kReleased, kGathering, kAvailable };
const char* to_string(UnitState state);

class Stage3 : public FlatStage {
 public:
  Stage3(const StageOptions& options, std::vector<at::Tensor> params, FlatLayout layout,
         std::shared_ptr<Communicator> comm, std::vector<UnitSpec> units);
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

 private:
  struct Unit {
    std::string name;
    std::vector<int> groups;  // non-persistent layout groups of this unit
    int64_t numel = 0;        // gathered numel (padded)
    int64_t bytes = 0;
    UnitState state = UnitState::kReleased;
    std::vector<WorkHandle> works;  // in flight while kGathering
    int expected_grads = 0;
    int arrived_grads = 0;
  };

  void after_grad(int param) override;
  void start_gather(int unit);   // kReleased -> kGathering (async all-gathers issued)
  void finish_gather(int unit);  // -> kAvailable; idempotent; blocks until the data is there
  void release(int unit);        // -> kReleased; frees the gathered storage
  void prefetch(const std::vector<int>& candidates, int current);

  std::vector<Unit> units_;
  std::vector<int> trace_;      // unit order of the recorded forward pass
  std::vector<int> recording_;  // the pass being recorded
  bool trace_valid_ = false;
  size_t trace_pos_ = 0;
  bool boundary_ = true;
  int64_t live_numel_ = 0;
  bool warned_live_ = false;
};

}  // namespace zero::detail
