// zero::Init, the counterpart of deepspeed.zero.Init: while an Init is alive, every
// zero::Sharded block constructed on this thread is partitioned at once: each rank keeps only
// its shard of the block's parameters (in the config's compute dtype), so no rank ever holds
// the whole stage 3 model. zero::initialize then takes the partitioned model; parameters
// outside wrapped blocks stay whole, as without Init. A zero::pipe::PipelineModule built while
// an Init is alive partitions each layer of its stage as it builds it (tied layers stay whole).
// With the same seed on every rank the values equal those of the model built whole.
//
//   zero::Init init("ds_config.json");     // stage 3; ranks from RANK/WORLD_SIZE (or SLURM_*, ...)
//   auto model = std::make_shared<Gpt>(cfg);  // blocks wrapped in zero::Sharded
//   auto engine = zero::initialize(model, "ds_config.json");
//
// A partitioned block's parameters keep their shapes but hold no memory until the engine
// gathers them: run it only through the engine.
#pragma once

#include <zero/comm/parallel_grid.h>
#include <zero/config/config.h>
#include <zero/core/layout.h>

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace zero {

class Init {
 public:
  // The config is resolved for the job's world size; zero_optimization.stage must be 3.
  explicit Init(const std::string& config_path);
  explicit Init(const ParsedConfig& config);
  // Tensor parallelism: shards over grid.data_group(), as zero::initialize(model, config, grid)
  // will (each tensor rank partitions its own slices).
  Init(const ParsedConfig& config, const ParallelGrid& grid);
  ~Init();
  Init(const Init&) = delete;
  Init& operator=(const Init&) = delete;

  // The Init alive on this thread, or nullptr.
  static const Init* active();
  // Converts `block`'s fp32 parameters and buffers to the compute dtype, returns this rank's
  // shard of each of its non-persistent layout groups (in layout order) and frees the
  // parameters' memory. Called by zero::Sharded's constructor.
  std::vector<at::Tensor> partition(torch::nn::Module& block) const;

  int rank() const { return rank_; }
  int world_size() const { return world_; }

 private:
  void setup(const Config& config, const ParallelGrid* grid);

  int rank_ = 0;
  int world_ = 1;
  c10::ScalarType dtype_ = c10::ScalarType::Float;
  int64_t persistence_threshold_numel_ = 0;
  LayoutOptions layout_options_;  // the engine's (zero/core/layout.h)
};

}  // namespace zero
