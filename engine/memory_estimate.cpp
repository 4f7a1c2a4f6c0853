// The memory formulas of memory_estimate.h; the DeepSpeed columns transcribe
// estimate_zero2/zero3_model_states_mem_needs from deepspeed/runtime/zero/stage_1_and_2.py,
// stage3.py.
#include <zero/engine/memory_estimate.h>

#include <algorithm>

#include <zero/error.h>

namespace zero {

Precision parse_precision(const std::string& text) {
  if (text == "fp16") return Precision::kFp16;
  if (text == "bf16") return Precision::kBf16;
  if (text == "fp32") return Precision::kFp32;
  throw UsageError(detail::str("precision '", text, "': use fp16, bf16 or fp32"));
}

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::kFp16:
      return "fp16";
    case Precision::kBf16:
      return "bf16";
    case Precision::kFp32:
      return "fp32";
  }
  return "?";
}

namespace {

int64_t compute_dtype_bytes(Precision precision) {
  return precision == Precision::kFp32 ? 4 : 2;
}
int64_t master_bytes(Precision precision) {
  return precision == Precision::kFp32 ? 0 : 4;
}
constexpr int64_t kAdamStateBytes = 8;  // exp_avg + exp_avg_sq in fp32
constexpr int64_t kHostGradBytes = 4;   // offloaded gradients are kept in fp32 on the host

int64_t shard_numel(int64_t numel, int world_size) {
  return (numel + world_size - 1) / world_size;
}

void check_options(const MemoryEstimateOptions& o) {
  ZERO_CHECK(o.total_params > 0, UsageError, "the number of parameters must be > 0, got ",
             o.total_params);
  ZERO_CHECK(o.largest_layer_params >= 0 && o.largest_layer_params <= o.total_params, UsageError,
             "the largest layer must hold between 0 and ", o.total_params, " parameters, got ",
             o.largest_layer_params);
  ZERO_CHECK(o.nodes > 0 && o.gpus_per_node > 0, UsageError,
             "nodes and devices per node must be > 0, got ", o.nodes, " and ", o.gpus_per_node);
  ZERO_CHECK(o.additional_buffer_factor >= 1.0, UsageError, "the buffer factor must be >= 1, got ",
             o.additional_buffer_factor);
}

// DeepSpeed's numbers, in its own arithmetic (Python int() truncation included).
void add_deepspeed_columns(const MemoryEstimateOptions& o, MemoryEstimateRow& row) {
  if (o.precision == Precision::kFp32 || row.stage < 2) return;
  const double p = static_cast<double>(o.total_params);
  const double ll_memory = 4.0 * static_cast<double>(o.largest_layer_params);
  const double f = o.additional_buffer_factor;
  const int64_t total_gpus = static_cast<int64_t>(o.nodes) * o.gpus_per_node;
  const double gpus_factor = 1.0 / o.nodes;
  double gpu = 0, cpu = 0;
  if (row.stage == 2) {
    if (row.offload_optimizer) {
      gpu = 2 * p;
      cpu = p * std::max(4.0 * total_gpus, 16.0) * f;
    } else {
      gpu = 2 * p + static_cast<double>(static_cast<int64_t>(18 * p / total_gpus));
      cpu = p * 4 * o.gpus_per_node * f;
    }
  } else if (row.offload_optimizer && row.offload_param) {
    gpu = ll_memory;
    cpu = p * std::max(4.0 * o.gpus_per_node, 18 * gpus_factor) * f;
  } else if (row.offload_optimizer) {
    gpu = ll_memory + static_cast<double>(static_cast<int64_t>(2 * p / total_gpus));
    cpu = p * std::max(4.0 * o.gpus_per_node, 16 * gpus_factor) * f;
  } else {
    gpu = ll_memory + static_cast<double>(static_cast<int64_t>(18 * p / total_gpus));
    cpu = p * 4 * o.gpus_per_node * f;
  }
  row.deepspeed_device_bytes = static_cast<int64_t>(gpu);
  row.deepspeed_host_bytes = static_cast<int64_t>(cpu);
}

MemoryEstimateRow make_row(const MemoryEstimateOptions& o, int stage, bool offload_optimizer,
                           bool offload_param) {
  const int world_size = o.nodes * o.gpus_per_node;
  const int64_t psi = o.total_params;
  const int64_t shard = shard_numel(psi, world_size);
  const int64_t p = compute_dtype_bytes(o.precision);

  MemoryEstimateRow row;
  row.stage = stage;
  row.offload_optimizer = offload_optimizer;
  row.offload_param = offload_param;
  row.device = zero_model_state_bytes(stage, psi, world_size, o.precision);
  int64_t host_states_per_rank = 0;
  if (offload_optimizer) {
    // Master and moments move to the host; stages 2-3 send each reduced gradient shard there
    // as it is produced, stage 1 keeps full gradients on the device until the boundary.
    row.device.master_params_bytes = 0;
    row.device.optimizer_states_bytes = 0;
    if (stage >= 2) row.device.gradients_bytes = 0;
    host_states_per_rank = (4 + kAdamStateBytes + kHostGradBytes) * shard;
  }
  if (offload_param) {
    row.device.parameters_bytes = 0;
    if (o.precision != Precision::kFp32)
      host_states_per_rank += p * shard;  // fp32: the master is the shard
  }
  row.device_bytes = row.device.total_bytes() + (stage == 3 ? 2 * p * o.largest_layer_params : 0);
  const double model_build = 4.0 * static_cast<double>(psi) * o.gpus_per_node;
  const double offloaded = static_cast<double>(host_states_per_rank) * o.gpus_per_node;
  row.host_bytes =
      static_cast<int64_t>(std::max(model_build, offloaded) * o.additional_buffer_factor);
  add_deepspeed_columns(o, row);
  return row;
}

}  // namespace

ModelStateBytes zero_model_state_bytes(int stage, int64_t num_params, int world_size,
                                       Precision precision) {
  ZERO_CHECK(stage >= 0 && stage <= 3, UsageError, "ZeRO stage must be 0-3, got ", stage);
  ZERO_CHECK(num_params >= 0 && world_size > 0, UsageError, "bad model size ", num_params,
             " or world size ", world_size);
  const int64_t shard = shard_numel(num_params, world_size);
  const int64_t p = compute_dtype_bytes(precision);
  ModelStateBytes b;
  b.parameters_bytes = p * (stage >= 3 ? shard : num_params);
  b.gradients_bytes = p * (stage >= 2 ? shard : num_params);
  b.master_params_bytes = master_bytes(precision) * (stage >= 1 ? shard : num_params);
  b.optimizer_states_bytes = kAdamStateBytes * (stage >= 1 ? shard : num_params);
  return b;
}

std::vector<MemoryEstimateRow> estimate_memory(const MemoryEstimateOptions& options) {
  check_options(options);
  return {make_row(options, 0, false, false), make_row(options, 1, false, false),
          make_row(options, 1, true, false),  make_row(options, 2, false, false),
          make_row(options, 2, true, false),  make_row(options, 3, false, false),
          make_row(options, 3, true, false),  make_row(options, 3, true, true)};
}

}  // namespace zero
