// Model-state memory per device and per host for ZeRO stages 0-3 with and without CPU offload:
// the ZeRO paper's accounting (docs/design.md) plus DeepSpeed's estimators for comparison.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero {

enum class Precision { kFp16, kBf16, kFp32 };
Precision parse_precision(const std::string& text);  // "fp16" | "bf16" | "fp32"; throws UsageError
const char* precision_name(Precision precision);

// Bytes of one rank's model states with an Adam-type optimizer. Mixed precision: 2-byte
// parameters and gradients, fp32 master (4) + two moments (8). fp32: 4-byte parameters and
// gradients, the parameters are the master copy, two moments (8). A partitioned quantity
// holds shard_numel = ceil(num_params / world_size) elements (the engine pads to a multiple
// of the world size), so e.g. stage 2 mixed is 2P + 14*shard_numel (2P + 14P/N for P % N == 0).
struct ModelStateBytes {
  int64_t parameters_bytes = 0;
  int64_t gradients_bytes = 0;
  int64_t master_params_bytes = 0;
  int64_t optimizer_states_bytes = 0;
  int64_t total_bytes() const {
    return parameters_bytes + gradients_bytes + master_params_bytes + optimizer_states_bytes;
  }
};
ModelStateBytes zero_model_state_bytes(int stage, int64_t num_params, int world_size,
                                       Precision precision);

struct MemoryEstimateOptions {
  int64_t total_params = 0;
  int64_t largest_layer_params = 0;  // stage 3 gathers one layer at a time on the device
  int nodes = 1;
  int gpus_per_node = 1;
  Precision precision = Precision::kFp16;
  double additional_buffer_factor = 1.5;  // DeepSpeed's slack on host memory
};

// One configuration. device_bytes = device.total_bytes() + the gathered largest layer (stage 3:
// its parameters and gradients in the compute dtype). host_bytes is per host (gpus_per_node
// ranks): max(every rank's fp32 model as the program builds it, 4P per rank; the offloaded
// states: fp32 master + moments + fp32 gradient = 16 bytes per shard element, + the compute-
// dtype parameter shard when parameters are offloaded too) * additional_buffer_factor.
// deepspeed_*: DeepSpeed's estimate_zero{2,3}_model_states_mem_needs (zero_init=False, since a
// LibTorch program builds the whole model) where one exists: stages 2 and 3, fp16/bf16.
struct MemoryEstimateRow {
  int stage = 0;
  bool offload_optimizer = false;
  bool offload_param = false;
  ModelStateBytes device;
  int64_t device_bytes = 0;
  int64_t host_bytes = 0;
  std::optional<int64_t> deepspeed_device_bytes;
  std::optional<int64_t> deepspeed_host_bytes;
};

// Rows: stage 0; 1 and 2 without and with offload_optimizer; 3 without offload, with
// offload_optimizer, and with offload_optimizer + offload_param. Throws UsageError on bad input.
std::vector<MemoryEstimateRow> estimate_memory(const MemoryEstimateOptions& options);

}  // namespace zero
