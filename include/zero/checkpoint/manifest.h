// The checkpoint manifest: what a checkpoint directory holds (world, stage, precision, counters,
// every parameter's name/shape/dtype, and which element ranges of which parameter each rank's
// safetensors file carries), as JSON, validated on read since a checkpoint may be untrusted.
#pragma once

#include <zero/checkpoint/tensor_split.h>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace zero::ckpt {

// Version 2 adds tensor parallelism (written only when the saving job had it; version 1
// otherwise, so older readers keep reading those).
constexpr int kFormatVersion = 2;
constexpr const char* kManifestFile = "manifest.json";
constexpr const char* kLatestFile = "latest";

// One trainable parameter, in the order of the saving engine's layout.
struct ManifestParam {
  std::string name;  // as registered in the saving program's model (wrappers included)
  std::vector<int64_t> shape;
  std::string dtype;       // the model's dtype while training: "F32", "BF16", "F16"
  std::string clean_name;  // the model's own name, without our wrappers' segments ("" = name)
  // Split over the tensor-parallel ranks (dim >= 0): `shape` is the whole tensor's; each
  // tensor rank's files hold pieces of its slice, in the slice's coordinates (TensorSplit).
  int64_t split_dim = -1;
  int64_t split_stride = 1;
  bool split() const { return split_dim >= 0; }
  int64_t numel() const;  // of the whole tensor
};

// A buffer or frozen parameter of the model, saved whole in rank 0's file as `module:<name>`.
struct ManifestBuffer {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;
  std::string clean_name;  // as ManifestParam::clean_name
};

// Elements [begin, end) of parameter `param` (flattened): one tensor per state kind in the file
// (`<kind>:<parameter name>:<begin>`, fp32, shape [end - begin]).
struct ManifestPiece {
  int param = 0;
  int64_t begin = 0, end = 0;
};

struct ManifestFile {
  std::string name;  // "rank00003.safetensors": a plain file name inside the checkpoint dir
  int rank = 0;
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<ManifestPiece> pieces;
  int tensor_rank = 0;  // whose slices its pieces of split parameters are
};

struct LossScalerState {
  double scale = 1.0;
  int hysteresis_left = 1;
  int64_t iteration = 0;
  int64_t last_overflow_iteration = -1;
};

struct Manifest {
  int format_version = kFormatVersion;
  std::string tag;
  int world_size = 1;
  int tensor_parallel_size = 1;    // the saving grid's tensor-parallel degree
  int pipeline_parallel_size = 1;  // its pipeline stages (each file holds its stage's layers)
  int stage = 0;
  std::string precision;                 // "fp32", "bf16", "fp16"
  std::string optimizer;                 // "AdamW", "Adam", "SGD"
  std::vector<std::string> state_kinds;  // "master" first, then the optimizer's, e.g. exp_avg
  std::string config_hash;
  int64_t global_steps = 0, micro_steps = 0, skipped_steps = 0;
  int64_t optimizer_steps = 0, scheduler_steps = 0;
  std::optional<LossScalerState> loss_scaler;
  nlohmann::json client_state = nlohmann::json::object();
  // zero::DistributedSampler's position (null: the program registered none).
  nlohmann::json data_sampler;
  std::vector<ManifestParam> params;
  std::vector<ManifestBuffer> buffers;
  std::vector<ManifestFile> files;  // files[r] is rank r's

  int find_param(const std::string& name) const;  // -1 when absent
  // Parameter `param`'s split over this checkpoint's tensor ranks (parts 1 when not split).
  TensorSplit split_of(int param) const;
  int64_t total_state_bytes() const;  // sum of files[].bytes
};

nlohmann::json manifest_to_json(const Manifest& m);
// Validates everything a reader relies on: format version (a newer one is refused, naming it),
// names (file names are plain components: no '/' or '..'), shapes, piece ranges inside their
// parameter, state kinds known. `what` names the file in errors.
Manifest manifest_from_json(const nlohmann::json& j, const std::string& what);
// Reads and validates `dir/manifest.json` (at most 256 MiB).
Manifest read_manifest(const std::string& dir);

// The tensor name of one piece of one state kind in a rank file.
std::string piece_tensor_name(const std::string& kind, const std::string& param, int64_t begin);
std::string buffer_tensor_name(const std::string& name);  // "module:<name>"
constexpr const char* kRngTensor = "rng:cpu";
// The generator of the CUDA device the parameters are on (dropout on a GPU draws from it).
constexpr const char* kCudaRngTensor = "rng:cuda";
// The tensor-parallel RNG tracker (zero::tp::rng_tracker): "rng:tp:seed" (I64 [1]) and one U8
// state per device it has forked on, "rng:tp:<device>" (e.g. rng:tp:cpu).
constexpr const char* kTpRngPrefix = "rng:tp:";

}  // namespace zero::ckpt
