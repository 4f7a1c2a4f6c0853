// DeepSpeed's `elasticity` section and its batch solver (deepspeed/elasticity/elasticity.py,
// transcribed): one global batch size that stays valid over a range of data-parallel sizes, and at
// each size the micro batch and accumulation steps that keep it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace zero {

struct ElasticityConfig {
  bool enabled = false;
  int64_t max_train_batch_size = 2000;
  std::vector<int64_t> micro_batch_sizes = {2, 4, 6};
  int64_t min_gpus = 1;
  int64_t max_gpus = 10000;
  int64_t num_gpus_per_node = 1;    // version 0.2
  int64_t model_parallel_size = 1;  // version 0.2
  double min_time = 0;              // for a scheduler: no effect on the batch
  double version = 0.2;             // DeepSpeed's LATEST_ELASTICITY_VERSION
  bool prefer_larger_batch = true;
  bool ignore_non_elastic_batch_info = false;
};

// What the solver chose for one data-parallel size.
struct ElasticBatch {
  int64_t train_batch_size = 0;
  std::vector<int64_t> valid_data_parallel_sizes;  // every size this batch works at
  int64_t micro_batch_size = 0;
  int64_t gradient_accumulation_steps = 0;
  // Version 0.2 at a size outside the valid ones: DeepSpeed then picks a batch for this size
  // alone (train_batch_size differs from the elastic one, elastic_batch_size).
  bool fallback = false;
  int64_t elastic_batch_size = 0;
};

// DeepSpeed's compute_elastic_config(ds_config, world_size = data_parallel_size,
// return_microbatch = True) plus the accumulation steps its config derives; version 0.2 sees
// data_parallel_size x model_parallel_size devices (its WORLD_SIZE). ConfigError (with DeepSpeed's
// reason, in our words) for an invalid section, a version above 0.2, model parallelism under
// version 0.1, a device count outside [min_gpus, max_gpus] (ours: DeepSpeed's version 0.2 falls
// back there too), and a data-parallel size not among the valid ones (version 0.1).
ElasticBatch compute_elastic_batch(const ElasticityConfig& config, int64_t data_parallel_size);

// The solver's pieces, for tests: candidate batch sizes from each base scaled by DeepSpeed's
// highly composite numbers, and the data-parallel sizes a batch size admits.
std::vector<int64_t> elastic_candidate_batch_sizes(const std::vector<int64_t>& bases,
                                                   int64_t max_acceptable_batch_size);
std::vector<int64_t> elastic_valid_sizes(int64_t batch_size,
                                         const std::vector<int64_t>& micro_batches,
                                         int64_t min_valid, int64_t max_valid);

}  // namespace zero
