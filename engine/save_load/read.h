// StateReader: reads element ranges of a checkpoint's fp32 states into the engine's tensors for
// Engine::load_checkpoint: straight into the tensor's memory when it is contiguous fp32 on the
// CPU (masters and moments there), else through one bounded fp32 chunk, cast and copied.
#pragma once

#include <zero/checkpoint/reader.h>

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace zero::detail {

class StateReader {
 public:
  // 4M elements: 16 MiB of staging at most, whatever the size of a parameter.
  static constexpr int64_t kDefaultChunkNumel = int64_t{1} << 22;

  explicit StateReader(ckpt::CheckpointReader& reader, int64_t chunk_numel = kDefaultChunkNumel);

  // Elements [begin, end) of state `kind` of checkpoint parameter `param` into `dst`: 1-D with
  // end - begin elements, of any dtype (cast from fp32 as copy_ casts) and on any device. Throws
  // CheckpointError as CheckpointReader::read_state does.
  // With tensor_rank >= 0: [begin, end) of that tensor rank's slice (CheckpointReader::read_slice).
  void read(const std::string& kind, int param, int64_t begin, int64_t end, const at::Tensor& dst,
            int tensor_rank = -1);

  // Elements that went through the staging chunk so far, and the chunk's size (tests).
  int64_t staged_numel() const { return staged_numel_; }
  int64_t staging_capacity() const { return static_cast<int64_t>(staging_.size()); }

 private:
  ckpt::CheckpointReader& reader_;
  int64_t chunk_numel_;
  std::vector<float> staging_;  // allocated on the first staged read
  int64_t staged_numel_ = 0;
};

}  // namespace zero::detail
