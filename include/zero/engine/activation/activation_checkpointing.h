// The settings and counters of activation checkpointing (no Torch here): what the ds_config's
// activation_checkpointing section turns on, and the bytes and seconds the checkpoints account.
#pragma once

#include <zero/config/config.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace zero {

class Communicator;

// What every checkpoint of one engine has saved and recomputed so far.
struct ActivationCheckpointStats {
  int64_t checkpoints = 0;  // inputs saved by a forward (each is recomputed once in backward)
  int64_t recomputes = 0;
  int64_t live_bytes = 0;  // saved inputs held now, where the model computes
  int64_t peak_live_bytes = 0;
  int64_t host_live_bytes = 0;  // saved inputs moved to host memory (cpu_checkpointing on a GPU)
  int64_t peak_host_live_bytes = 0;
  int64_t moved_bytes = 0;  // device -> host -> device copies, each direction counted
  // profile: wall seconds of the checkpointed forwards (without autograd) and of the recomputes
  // (the forward again, with autograd, not the backward through it).
  double forward_seconds = 0;
  double recompute_seconds = 0;
};

// Shared by the checkpoints of one engine (or the process-wide default one). Thread-safe: on a
// GPU backward runs on autograd's device threads.
class ActivationCheckpointing {
 public:
  explicit ActivationCheckpointing(ActivationCheckpointingConfig config = {}) : config_(config) {}
  static std::shared_ptr<ActivationCheckpointing> process_default();

  const ActivationCheckpointingConfig& config() const { return config_; }
  // partition_activations with tensor parallelism: each checkpoint keeps this rank's 1/T of its
  // input (replicated over `group`, the tensor group) and all-gathers it for the recompute.
  void partition_over(std::shared_ptr<Communicator> group) { partition_group_ = std::move(group); }
  const std::shared_ptr<Communicator>& partition_group() const { return partition_group_; }
  ActivationCheckpointStats stats() const;
  // Peaks restart from what is live now (a benchmark measures one step).
  void reset_peaks();
  std::string describe() const;

  // Called by the checkpoints.
  void saved(int64_t bytes, bool on_host);
  void released(int64_t bytes, bool on_host);
  void moved(int64_t bytes);
  void forward_timed(double seconds);
  void recomputed(double seconds);  // seconds: 0 unless profile

 private:
  ActivationCheckpointingConfig config_;
  std::shared_ptr<Communicator> partition_group_;  // null: inputs are kept whole
  mutable std::mutex mutex_;
  ActivationCheckpointStats stats_;
};

}  // namespace zero
