// CheckpointReader: one checkpoint directory opened for reading: its validated manifest and its
// rank files, opened on first use, so a loader reads only the element ranges it needs (the
// manifest says which file holds which range) and never the whole checkpoint.
#pragma once

#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/safetensors.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace zero::ckpt {

// The directory of a checkpoint: load_dir/tag, or load_dir/<contents of load_dir/latest> when
// tag is empty; nullopt when tag is empty and there is no `latest` (no checkpoint yet). The tag
// must be a plain directory name. Throws CheckpointError when the directory is missing.
std::optional<std::string> resolve_checkpoint_dir(const std::string& load_dir,
                                                  const std::string& tag);

class CheckpointReader {
 public:
  explicit CheckpointReader(std::string dir);  // reads and validates the manifest
  ~CheckpointReader();
  CheckpointReader(CheckpointReader&&) noexcept;
  CheckpointReader& operator=(CheckpointReader&&) noexcept;

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }

  // Elements [begin, end) of state `kind` (a manifest state kind) of parameter `param`, fp32,
  // gathered from every piece that covers them. Throws when a range is not covered or a file is
  // missing, truncated or does not hold the tensors the manifest names.
  // Coordinates are the whole tensor's, also for a parameter split over tensor ranks (its
  // slices' pieces are read where the whole's elements sit).
  void read_state(const std::string& kind, int param, int64_t begin, int64_t end, float* out);
  // The same in the coordinates of tensor rank `tensor_rank`'s slice of a split parameter
  // (tensor_rank 0 and whole coordinates for one that is not split).
  void read_slice(const std::string& kind, int param, int tensor_rank, int64_t begin, int64_t end,
                  float* out);
  // Rank `rank`'s file's tensor `name`, checked to have `dtype` and `bytes` bytes.
  void read_tensor(int rank, const std::string& name, DType dtype, int64_t bytes, void* out);
  // The tensor's info in rank `rank`'s file, or nullptr.
  const TensorInfo* find_tensor(int rank, const std::string& name);
  // Recomputes the CRC32C of the given ranks' files (all when empty) against the manifest.
  void verify(const std::vector<int>& ranks = {});
  // Bytes read from rank files so far (data only).
  int64_t bytes_read() const { return bytes_read_; }

 private:
  struct Cover {
    int rank;
    int64_t begin, end;
  };
  SafetensorsReader& file(int rank);

  std::string dir_;
  Manifest manifest_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;  // by rank, opened on first use
  // By parameter, then slice (tensor rank; one for a parameter that is not split), by begin.
  std::vector<std::vector<std::vector<Cover>>> covers_;
  int64_t bytes_read_ = 0;
};

}  // namespace zero::ckpt
