// What a checkpoint holds of the engine, as data: which element ranges of which parameter each
// rank saves (its layout shard, at every stage) and where those elements sit in the rank's
// optimizer state tensors. Shared by save and load, so both agree on the mapping.
#pragma once

#include "engine_impl.h"

#include <zero/checkpoint/manifest.h>

#include <ATen/core/Generator.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zero::detail {

// Elements [param_begin, param_end) of layout parameter `param` sit at `state_offset` of the
// state tensors of optimizer shard `shard`.
struct StatePiece {
  int param = 0;
  int shard = 0;
  int64_t param_begin = 0, param_end = 0;
  int64_t state_offset = 0;
};

// Elements `elems` of layout parameter `param`.
struct ParamPart {
  int param = 0;
  ParamRange elems;
};

// The pieces rank `rank` saves: its layout shard of every parameter (stage 0 holds everything
// but saves only that part, so the ranks share the writing).
std::vector<StatePiece> saved_pieces(const FlatLayout& layout, int stage, int rank);
// With tensor parallelism: the pieces the rank at (data_rank, tensor_rank) of the grid saves: its
// layout shard of its slices, and of the replicated parameters only on tensor rank 0 (every
// tensor rank holds the same values).
std::vector<StatePiece> saved_pieces(const Engine::Impl& s, int data_rank, int tensor_rank);
// How the tensor group splits layout parameter `param` (nullptr: not split, or no tp).
const SplitLayout* split_of(const Engine::Impl& s, int param);
// The whole tensor's shape of layout parameter `param` (its slice's shape x tp along the split).
std::vector<int64_t> whole_shape(const Engine::Impl& s, int param);
// The pieces this rank's optimizer state covers: its shard (stages 1-3) or everything (stage 0).
std::vector<StatePiece> held_pieces(const FlatLayout& layout, int stage, int rank);
// The elements of every parameter outside rank `rank`'s layout shard: what stages 1-2
// all-gather into the full parameters after the optimizer updated the shards.
std::vector<ParamPart> unheld_parts(const FlatLayout& layout, int rank);

std::string precision_name(at::ScalarType compute_dtype);  // "fp32", "bf16", "fp16"
std::string safetensors_dtype(at::ScalarType dtype);       // "F32", "BF16", ...
at::ScalarType scalar_type_of(const std::string& safetensors_dtype);
// FNV-1a: a hash that is the same in every build (tags, configs).
uint64_t fnv1a(const std::string& text);
// A stable hash of the resolved config (FNV-1a of its JSON), as 16 hex digits.
std::string config_hash(const Config& config);

// The random generators a rank's file carries, by tensor name: the CPU's (kRngTensor) and,
// when the parameters are on a CUDA device, that device's (kCudaRngTensor).
std::vector<std::pair<std::string, at::Generator>> rng_generators(at::Device param_device);

// Buffers and frozen parameters of the model: saved whole by rank 0.
std::vector<std::pair<std::string, at::Tensor>> module_buffers(const Engine::Impl& impl);
// The same, a frozen parameter that a zero::tp layer splits assembled whole from the tensor
// group's slices: collective over the tensor group when the model has one.
std::vector<std::pair<std::string, at::Tensor>> whole_module_buffers(const Engine::Impl& impl);

}  // namespace zero::detail
