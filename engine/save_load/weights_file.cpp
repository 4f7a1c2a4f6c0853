// WeightsFile: the three kinds of weight files zero::load_state_dict reads.
#include "save_load/weights_file.h"

#include "save_load/state.h"

#include <zero/checkpoint/atomic_files.h>
#include <zero/error.h>

#include <torch/serialize.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

namespace zero::detail {

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// A torch.save / torch::pickle_save file is a zip archive.
bool is_zip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  return in.gcount() == 4 && magic[0] == 'P' && magic[1] == 'K' && magic[2] == 3 && magic[3] == 4;
}

}  // namespace

WeightsFile::WeightsFile(std::string path) : path_(std::move(path)) {
  ZERO_CHECK(std::filesystem::is_regular_file(path_), CheckpointError, "load_state_dict: ", path_,
             ": no such file");
  if (ends_with(path_, ".json")) {
    // Hugging Face's sharded layout: {"weight_map": {name: shard file beside the index}}.
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(ckpt::read_small_file(path_, 64u << 20));
    } catch (const nlohmann::json::exception& e) {
      throw CheckpointError(
          str("load_state_dict: ", path_, ": not a safetensors index: ", e.what()));
    }
    ZERO_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               CheckpointError, "load_state_dict: ", path_,
               ": not a safetensors index (no \"weight_map\" object)");
    std::map<std::string, std::string> shards;  // shard file -> its first tensor, for errors
    for (const auto& [name, file] : index["weight_map"].items()) {
      ZERO_CHECK(file.is_string(), CheckpointError, "load_state_dict: ", path_, ": weight_map['",
                 name, "'] is not a file name");
      shards.emplace(file.get<std::string>(), name);
    }
    const std::filesystem::path dir = std::filesystem::path(path_).parent_path();
    for (const auto& [file, first] : shards) add_safetensors((dir / file).string());
    for (const auto& [name, file] : index["weight_map"].items())
      ZERO_CHECK(find(name), CheckpointError, "load_state_dict: ", path_, ": '", name,
                 "' is mapped to ", file.get<std::string>(), ", which does not hold it");
  } else if (is_zip(path_)) {
    std::ifstream in(path_, std::ios::binary);
    const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
    c10::IValue value;
    try {
      value = torch::pickle_load(bytes);
    } catch (const std::exception& e) {
      throw CheckpointError(str("load_state_dict: ", path_, ": cannot read it as a torch-format ",
                                "export: ", e.what()));
    }
    ZERO_CHECK(value.isGenericDict(), CheckpointError, "load_state_dict: ", path_,
               ": a torch file that is not a dict of name -> tensor");
    for (const auto& item : value.toGenericDict()) {
      ZERO_CHECK(item.key().isString() && item.value().isTensor(), CheckpointError,
                 "load_state_dict: ", path_, ": a torch file that is not a dict of name -> tensor");
      const at::Tensor t = item.value().toTensor();
      index_.emplace(item.key().toStringRef(), entries_.size());
      entries_.push_back({item.key().toStringRef(), t.scalar_type(),
                          std::vector<int64_t>(t.sizes().begin(), t.sizes().end())});
      where_.push_back({});
      dict_.insert(item.key().toStringRef(), t);
    }
  } else {
    add_safetensors(path_);
  }
}

WeightsFile::~WeightsFile() = default;

void WeightsFile::add_safetensors(const std::string& file_path) {
  files_.push_back(std::make_unique<ckpt::SafetensorsReader>(file_path));
  const int file = static_cast<int>(files_.size()) - 1;
  for (const ckpt::TensorInfo& t : files_.back()->tensors()) {
    ZERO_CHECK(index_.emplace(t.name, entries_.size()).second, CheckpointError,
               "load_state_dict: ", path_, ": '", t.name, "' appears twice");
    entries_.push_back({t.name, scalar_type_of(ckpt::dtype_name(t.dtype)), t.shape});
    where_.push_back({file, &t});
  }
}

const WeightsFile::Entry* WeightsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

at::Tensor WeightsFile::read(const std::string& name) const {
  auto it = index_.find(name);
  ZERO_CHECK(it != index_.end(), CheckpointError, "load_state_dict: ", path_, ": no tensor '", name,
             "'");
  const Where& w = where_[it->second];
  if (w.file < 0) return dict_.at(name);
  const Entry& e = entries_[it->second];
  at::Tensor out = at::empty(e.shape, at::TensorOptions().dtype(e.dtype));
  files_[w.file]->read_all(*w.info, out.data_ptr());
  return out;
}

}  // namespace zero::detail
