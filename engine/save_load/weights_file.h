// A file of named weights to load into a model (zero::load_state_dict): one safetensors file,
// the index of a sharded safetensors export (model.safetensors.index.json, Hugging Face's
// weight_map), or a torch-format export (`zero checkpoint export --format torch`: a pickled dict
// of name -> tensor). Tensors are read one at a time, on demand.
#pragma once

#include <zero/checkpoint/safetensors.h>

#include <ATen/core/Tensor.h>
#include <ATen/core/Dict.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace zero::detail {

class WeightsFile {
 public:
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
  };

  // Reads the headers (safetensors) or the whole dict (torch format). Throws CheckpointError
  // naming the file when it is none of the three kinds or is damaged.
  explicit WeightsFile(std::string path);
  ~WeightsFile();

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;  // nullptr when absent
  // The tensor `name` (CPU, the file's dtype and shape).
  at::Tensor read(const std::string& name) const;

 private:
  struct Where {
    int file = -1;  // index into files_ (safetensors), or -1: the torch dict
    const ckpt::TensorInfo* info = nullptr;
  };
  void add_safetensors(const std::string& file_path);

  std::string path_;
  std::vector<Entry> entries_;
  std::map<std::string, size_t> index_;  // name -> entries_ / where_ position
  std::vector<Where> where_;
  std::vector<std::unique_ptr<ckpt::SafetensorsReader>> files_;
  c10::Dict<std::string, at::Tensor> dict_;  // torch format
};

}  // namespace zero::detail
