// zero::DistributedSampler: seeded epoch permutations with a global sample position, registered
// with an engine so that checkpoints carry the position.
#include <zero/engine/distributed_sampler.h>

#include "engine_impl.h"

#include <zero/error.h>

#include <random>

namespace zero {

namespace {

// A value in [0, n) from the generator's 64 bits without modulo bias: the same on every platform
// (std::uniform_int_distribution's algorithm is the library's choice).
uint64_t bounded(std::mt19937_64& gen, uint64_t n) {
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = gen();
    if (r >= threshold) return r % n;
  }
}

Engine::Impl* impl_of(void* p) {
  return static_cast<Engine::Impl*>(p);
}

}  // namespace

DistributedSampler::DistributedSampler(int64_t num_samples, int64_t micro_batch,
                                       int64_t accumulation_steps, int data_rank, int data_size,
                                       Options options)
    : num_samples_(num_samples),
      micro_(micro_batch),
      accumulation_(accumulation_steps),
      data_rank_(data_rank),
      data_size_(data_size),
      options_(options) {
  ZERO_CHECK(micro_ > 0 && accumulation_ > 0 && data_size_ > 0 && data_rank_ >= 0 &&
                 data_rank_ < data_size_,
             UsageError, "DistributedSampler: micro batch ", micro_, ", accumulation steps ",
             accumulation_, ", data rank ", data_rank_, " of ", data_size_,
             ": expected positive sizes and a rank within the group");
  check_batch();
}

DistributedSampler::DistributedSampler(int64_t num_samples, Engine& engine)
    : DistributedSampler(num_samples, engine, Options{}) {}

DistributedSampler::DistributedSampler(int64_t num_samples, Engine& engine, Options options)
    : DistributedSampler(num_samples, engine.config().train_micro_batch_size_per_gpu,
                         engine.config().gradient_accumulation_steps, engine.impl_->data->rank(),
                         engine.data_parallel_size(), options) {
  Engine::Impl& s = *engine.impl_;
  ZERO_CHECK(!s.sampler, UsageError,
             "DistributedSampler: the engine has a sampler already; one per engine");
  s.sampler = this;
  engine_ = &s;
  if (!s.loaded_sampler_state.is_null()) {
    load_state(s.loaded_sampler_state);
    s.loaded_sampler_state = nullptr;
  }
}

DistributedSampler::~DistributedSampler() {
  if (engine_) impl_of(engine_)->sampler = nullptr;
}

void DistributedSampler::check_batch() const {
  ZERO_CHECK(num_samples_ >= global_batch(), UsageError, "DistributedSampler: ", num_samples_,
             " samples are fewer than one global batch of ", global_batch(), " (micro batch ",
             micro_, " x ", accumulation_, " accumulation steps x ", data_size_, " data ranks)");
}

std::vector<int64_t> DistributedSampler::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(static_cast<size_t>(num_samples_));
  for (int64_t i = 0; i < num_samples_; ++i) order[static_cast<size_t>(i)] = i;
  if (!options_.shuffle) return order;
  // Fisher-Yates over a generator seeded from (seed, epoch).
  std::mt19937_64 gen(options_.seed * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(epoch) + 1);
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[bounded(gen, i)]);
  return order;
}

std::vector<int64_t> DistributedSampler::next() {
  if (order_epoch_ != epoch_) {
    order_ = epoch_order(epoch_);
    order_epoch_ = epoch_;
  }
  const int64_t first = position_ + (micro_step_ * data_size_ + data_rank_) * micro_;
  std::vector<int64_t> out(order_.begin() + first, order_.begin() + first + micro_);
  if (++micro_step_ == accumulation_) {
    micro_step_ = 0;
    position_ += global_batch();
    if (position_ + global_batch() > num_samples_) {  // the rest is no whole batch: dropped
      position_ = 0;
      ++epoch_;
    }
  }
  return out;
}

nlohmann::json DistributedSampler::state() const {
  ZERO_CHECK(micro_step_ == 0, UsageError,
             "DistributedSampler: its position is saved between "
             "optimizer steps, but it has handed out ",
             micro_step_, " of the ", accumulation_, " micro-batches of a step");
  return {{"epoch", epoch_},
          {"position", position_},
          {"num_samples", num_samples_},
          {"seed", options_.seed},
          {"shuffle", options_.shuffle}};
}

void DistributedSampler::load_state(const nlohmann::json& j) {
  try {
    const int64_t n = j.at("num_samples").get<int64_t>();
    const uint64_t seed = j.at("seed").get<uint64_t>();
    const bool shuffle = j.at("shuffle").get<bool>();
    ZERO_CHECK(n == num_samples_ && seed == options_.seed && shuffle == options_.shuffle,
               CheckpointError, "DistributedSampler: the checkpoint's data position is over ", n,
               " samples (seed ", seed, ", shuffle ", shuffle, ") but this sampler has ",
               num_samples_, " (seed ", options_.seed, ", shuffle ", options_.shuffle,
               "); the dataset or its order changed");
    const int64_t epoch = j.at("epoch").get<int64_t>();
    const int64_t position = j.at("position").get<int64_t>();
    ZERO_CHECK(epoch >= 0 && position >= 0 && position < num_samples_, CheckpointError,
               "DistributedSampler: the checkpoint's position (epoch ", epoch, ", sample ",
               position, ") is outside the dataset of ", num_samples_);
    epoch_ = epoch;
    position_ = position;
    micro_step_ = 0;
    // Another global batch (not an elastic restart) can leave less than a batch in the epoch.
    if (position_ + global_batch() > num_samples_) {
      position_ = 0;
      ++epoch_;
    }
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(
        detail::str("DistributedSampler: the checkpoint's data position is "
                    "malformed: ",
                    e.what()));
  }
}

}  // namespace zero
