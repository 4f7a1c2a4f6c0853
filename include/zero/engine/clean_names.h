// The model's own names for its tensors: every segment our wrappers add (zero::Sharded and
// zero::Checkpointed register the wrapped module as `inner`) removed, as PyTorch FSDP's
// clean_tensor_name drops its wrappers' segments. Exports, save_16bit_model and the checkpoint
// manifest carry these, so a program that builds the model without our wrappers finds its names.
#pragma once

#include <torch/nn/module.h>

#include <string>
#include <unordered_set>
#include <vector>

namespace zero {

class CleanNames {
 public:
  // Reads which modules of `model` are our wrappers. Structural: only the `inner` child of a
  // wrapper is dropped, so a user's own child called `inner` keeps its name.
  explicit CleanNames(const torch::nn::Module& model);

  // "blocks.2.inner.fc.bias" -> "blocks.2.fc.bias" when blocks.2 is a wrapper.
  std::string operator()(const std::string& registered) const;

  // The clean names of `registered`, in order. Throws UsageError naming both registered names
  // when two of them map to one clean name.
  std::vector<std::string> all(const std::vector<std::string>& registered) const;

 private:
  std::unordered_set<std::string> wrappers_;  // registered paths of wrapper modules ("" = root)
};

}  // namespace zero
