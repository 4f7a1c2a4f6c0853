// zero::DistributedSampler: which samples of a dataset each data-parallel rank trains on, step
// by step, as a position that survives a restart at another world size. Each epoch is a seeded
// permutation of the N samples (the same on every rank; N / global batch whole batches, the rest
// dropped); optimizer step k of the epoch trains on the permutation's samples [k B, (k + 1) B),
// and micro-step m of rank r takes the micro batch at (m x data ranks + r) x micro within them.
// The position is a global sample index, so the samples of each step do not depend on how many
// ranks share them: after a restart at another data-parallel size with the same global batch
// (elasticity), no sample is skipped or seen twice.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

namespace zero {

class Engine;

class DistributedSampler {
 public:
  struct Options {
    uint64_t seed = 0;
    bool shuffle = true;  // false: the samples in order, every epoch
  };
  // The batch sizes and this rank's place in the data-parallel group given directly.
  DistributedSampler(int64_t num_samples, int64_t micro_batch, int64_t accumulation_steps,
                     int data_rank, int data_size, Options options);
  // From the engine: its config's micro batch and accumulation steps and its data rank. The
  // engine then saves the position with every checkpoint and restores it when it loads one
  // (before or after this sampler is made).
  DistributedSampler(int64_t num_samples, Engine& engine, Options options);
  DistributedSampler(int64_t num_samples, Engine& engine);
  ~DistributedSampler();
  DistributedSampler(const DistributedSampler&) = delete;
  DistributedSampler& operator=(const DistributedSampler&) = delete;

  // This rank's sample indices for its next micro-step (micro_batch of them); after the last
  // micro-step of an optimizer step the position moves to the next global batch, and after the
  // last whole batch of an epoch to the next epoch.
  std::vector<int64_t> next();

  int64_t num_samples() const { return num_samples_; }
  int64_t global_batch() const { return micro_ * accumulation_ * data_size_; }
  int64_t steps_per_epoch() const { return num_samples_ / global_batch(); }
  int64_t epoch() const { return epoch_; }
  // Where the current optimizer step's global batch starts in the epoch's permutation.
  int64_t position() const { return position_; }
  // The samples of the epoch in training order.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  // At an optimizer step boundary (UsageError in the middle of a step's micro-batches): epoch,
  // position, and what must not change across a restart (sample count, seed, shuffle).
  nlohmann::json state() const;
  // Restores state(); CheckpointError when the sample count, seed or shuffle differ.
  void load_state(const nlohmann::json& state);

 private:
  void check_batch() const;
  friend class Engine;  // detaches the sampler when it goes first

  int64_t num_samples_;
  int64_t micro_, accumulation_;
  int data_rank_, data_size_;
  Options options_;
  int64_t epoch_ = 0, position_ = 0, micro_step_ = 0;
  std::vector<int64_t> order_;  // epoch_'s permutation (made on first use)
  int64_t order_epoch_ = -1;
  void* engine_ = nullptr;  // the Engine::Impl that saves this sampler's position
};

}  // namespace zero
