// The way back from an export: weights saved by `zero checkpoint export` (safetensors, sharded
// safetensors or torch format) or Engine::save_16bit_model, loaded into a model built with or
// without zero::Sharded / zero::Checkpointed, matched by the model's own (clean) names.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace zero {

// What PyTorch's load_state_dict returns: the model's names the file lacks and the file's names
// the model lacks (clean names).
struct LoadedStateDict {
  std::vector<std::string> missing_keys;
  std::vector<std::string> unexpected_keys;
};

// Loads `file` into `model`'s parameters and buffers. A name matches by its clean name (our
// wrappers' segments removed, as exports write them) or its registered one; values are cast to
// the model's floating type (an fp32 export into a bf16 model, and back). The file holds whole
// tensors: a parameter a zero::tp layer splits takes this rank's slice of it (any degree, any
// stride), so an unsplit export loads into a tensor-parallel model. Shape mismatches, and
// with `strict` any missing or unexpected name, throw CheckpointError listing the first few.
//
// Before zero::initialize, or on a model no engine trains: a plain copy into the tensors.
// After it: collective (every rank calls it), through the engine that trains `model`, so the
// fp32 masters, stage 3's parameter shards and offloaded states get the values (the optimizer's
// moments are kept, as PyTorch keeps them when only the model's weights are loaded).
LoadedStateDict load_state_dict(torch::nn::Module& model, const std::string& file,
                                bool strict = true);

}  // namespace zero
