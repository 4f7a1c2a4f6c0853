// TensorSplit: the index arithmetic between a tensor-parallel slice and its whole tensor. With
// outer = prod(whole[:dim]), len = whole[dim], inner = prod(whole[dim+1:]) and chunk = len /
// (stride x parts), block b of the whole along dim (b = s x parts + rank) is block s of rank's
// slice; an element's run is the chunk x inner elements of one (outer index, block).
#include <zero/checkpoint/tensor_split.h>

#include <zero/error.h>

#include <algorithm>

namespace zero::ckpt {
namespace {

struct Geometry {
  int64_t outer = 1, len = 1, inner = 1, chunk = 1;
};

Geometry geometry(const TensorSplit& s) {
  ZERO_CHECK(
      s.dim >= 0 && s.dim < static_cast<int64_t>(s.whole.size()) && s.parts >= 1 && s.stride >= 1,
      CheckpointError, "tensor split: dimension ", s.dim, " of a ", s.whole.size(), "-d tensor, ",
      s.parts, " parts, stride ", s.stride);
  Geometry g;
  for (int64_t d = 0; d < s.dim; ++d) g.outer *= s.whole[d];
  g.len = s.whole[s.dim];
  for (size_t d = s.dim + 1; d < s.whole.size(); ++d) g.inner *= s.whole[d];
  ZERO_CHECK(g.len % (s.stride * s.parts) == 0, CheckpointError, "tensor split: dimension ", s.dim,
             " (", g.len, ") is not divisible by stride ", s.stride, " x ", s.parts, " parts");
  g.chunk = g.len / (s.stride * s.parts);
  return g;
}

}  // namespace

int64_t TensorSplit::whole_numel() const {
  int64_t n = 1;
  for (int64_t d : whole) n *= d;
  return n;
}

std::vector<TensorSplit::Run> TensorSplit::runs_of_slice(int rank, int64_t begin,
                                                         int64_t end) const {
  const Geometry g = geometry(*this);
  const int64_t run = g.chunk * g.inner;              // elements of one (outer, block)
  const int64_t slice_row = g.len / parts * g.inner;  // one outer index of the slice
  std::vector<Run> out;
  for (int64_t at = begin; at < end;) {
    const int64_t o = at / slice_row, in_row = at % slice_row;
    const int64_t s = in_row / run, off = in_row % run;
    const int64_t length = std::min(end - at, run - off);
    const int64_t block = s * parts + rank;
    out.push_back({rank, at, o * g.len * g.inner + block * run + off, length});
    at += length;
  }
  return out;
}

std::vector<TensorSplit::Run> TensorSplit::runs_of_whole(int64_t begin, int64_t end) const {
  const Geometry g = geometry(*this);
  const int64_t run = g.chunk * g.inner;
  const int64_t whole_row = g.len * g.inner;
  const int64_t slice_row = g.len / parts * g.inner;
  std::vector<Run> out;
  for (int64_t at = begin; at < end;) {
    const int64_t o = at / whole_row, in_row = at % whole_row;
    const int64_t block = in_row / run, off = in_row % run;
    const int64_t length = std::min(end - at, run - off);
    const int rank = static_cast<int>(block % parts);
    const int64_t s = block / parts;
    out.push_back({rank, o * slice_row + s * run + off, at, length});
    at += length;
  }
  return out;
}

}  // namespace zero::ckpt
