// Where a tensor-parallel slice's elements sit in the whole tensor, and back: a parameter of
// `whole` shape cut along `dim` into stride x parts equal blocks, of which tensor rank r holds
// blocks r, r + parts, ... (zero::tp's SplitParameter). Checkpoints store slices; a loader at
// another degree reads its own slice's elements through the whole tensor's coordinates.
#pragma once

#include <cstdint>
#include <vector>

namespace zero::ckpt {

struct TensorSplit {
  std::vector<int64_t> whole;  // the whole tensor's shape
  int64_t dim = 0;
  int64_t stride = 1;
  int parts = 1;
  int64_t whole_numel() const;
  int64_t slice_numel() const { return whole_numel() / parts; }
  // The elements [slice_begin, slice_begin + length) of `rank`'s slice are [whole_begin, +length)
  // of the whole tensor (both flattened, row-major).
  struct Run {
    int rank = 0;
    int64_t slice_begin = 0, whole_begin = 0, length = 0;
  };
  // Runs covering elements [begin, end) of `rank`'s slice, in slice order.
  std::vector<Run> runs_of_slice(int rank, int64_t begin, int64_t end) const;
  // Runs covering elements [begin, end) of the whole tensor, in whole order.
  std::vector<Run> runs_of_whole(int64_t begin, int64_t end) const;
};

}  // namespace zero::ckpt
