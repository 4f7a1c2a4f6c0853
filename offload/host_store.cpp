// StateStore in host memory: each shard's master and moments are whole host tensors and a
// sub-group is a view into them.
#include "state_store.h"

#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>

#include <ATen/ATen.h>

#include <algorithm>

namespace zero::offload {

std::vector<SubGroup> split_sub_groups(const std::vector<int64_t>& shard_numels,
                                       int64_t sub_group_numel, int64_t align_numel) {
  ZERO_CHECK(sub_group_numel > 0, ConfigError, "zero_optimization.sub_group_size must be > 0, got ",
             sub_group_numel);
  // Rounded up to whole 64-element blocks: the vectorized kernel's lanes and scalar tail then
  // split each sub-group where they split the whole shard, so the result is bitwise that of one
  // pass over the shard (the scalar tail rounds a*b+c twice, the vector lanes once).
  ZERO_ASSERT(align_numel % kSubGroupAlignNumel == 0, "sub-group alignment ", align_numel);
  const int64_t step = (sub_group_numel + align_numel - 1) / align_numel * align_numel;
  std::vector<SubGroup> out;
  for (size_t s = 0; s < shard_numels.size(); ++s)
    for (int64_t b = 0; b < shard_numels[s]; b += step)
      out.push_back({s, b, std::min(step, shard_numels[s] - b)});
  return out;
}

namespace {

class HostStore : public StateStore {
 public:
  explicit HostStore(bool pin) : pin_(pin) {}

  void init(const std::vector<int64_t>& shard_numels, const std::vector<SubGroup>& sub_groups,
            const std::function<void(size_t k, const at::Tensor& master)>& fill) override {
    sub_groups_ = sub_groups;
    shards_.resize(shard_numels.size());
    for (size_t s = 0; s < shards_.size(); ++s) {
      shards_[s].master = host_empty(shard_numels[s], at::kFloat, pin_);
      shards_[s].exp_avg = host_empty(shard_numels[s], at::kFloat, pin_).zero_();
      shards_[s].exp_avg_sq = host_empty(shard_numels[s], at::kFloat, pin_).zero_();
    }
    for (size_t k = 0; k < sub_groups.size(); ++k) fill(k, view(k).master);
  }

  SubGroupState begin(size_t k) override { return view(k); }
  void end(size_t k) override {}
  void finish() override {}
  SubGroupState shard_state(size_t shard) override { return shards_.at(shard); }
  void commit() override {}

  OffloadMemory memory() const override {
    OffloadMemory m;
    for (const auto& s : shards_) {
      m.host_master_bytes += s.master.nbytes();
      m.host_states_bytes += s.exp_avg.nbytes() + s.exp_avg_sq.nbytes();
    }
    return m;
  }
  const char* location() const override { return "cpu"; }

 private:
  SubGroupState view(size_t k) const {
    const SubGroup& g = sub_groups_.at(k);
    const SubGroupState& s = shards_[g.shard];
    return {s.master.narrow(0, g.begin, g.numel), s.exp_avg.narrow(0, g.begin, g.numel),
            s.exp_avg_sq.narrow(0, g.begin, g.numel)};
  }

  bool pin_;
  std::vector<SubGroup> sub_groups_;
  std::vector<SubGroupState> shards_;
};

}  // namespace

std::unique_ptr<StateStore> make_host_store(bool pin_memory) {
  return std::make_unique<HostStore>(pin_memory);
}

}  // namespace zero::offload
