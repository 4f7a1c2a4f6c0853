// TensorSplit against a brute-force model: every element of the whole tensor, labelled by its
// flat index, is sliced as zero::tp slices (blocks r, r + parts, ... along dim); the runs must
// map each slice element to its label and each whole element to its slice and rank.
#include <zero/checkpoint/tensor_split.h>

#include <catch2/catch.hpp>

#include <vector>

using zero::ckpt::TensorSplit;

namespace {

// The slice of `rank` as flat whole indices, built the obvious way (row-major walk).
std::vector<int64_t> brute_slice(const TensorSplit& s, int rank) {
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < s.dim; ++d) outer *= s.whole[d];
  for (size_t d = s.dim + 1; d < s.whole.size(); ++d) inner *= s.whole[d];
  const int64_t len = s.whole[s.dim], chunk = len / (s.stride * s.parts);
  std::vector<int64_t> out;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t b = 0; b < s.stride; ++b)
      for (int64_t c = 0; c < chunk; ++c)
        for (int64_t i = 0; i < inner; ++i)
          out.push_back((o * len + (b * s.parts + rank) * chunk + c) * inner + i);
  return out;
}

}  // namespace

TEST_CASE("tensor split: runs agree with the brute-force slice, both ways") {
  const std::vector<TensorSplit> cases = {
      {{12, 5}, 0, 1, 2},    // Column weight
      {{12}, 0, 3, 2},       // strided QKV bias
      {{12, 5}, 0, 3, 2},    // strided QKV weight
      {{6, 8}, 1, 1, 4},     // Row weight: one run per row
      {{3, 8, 2}, 1, 2, 2},  // a middle dimension with a stride
      {{7, 3}, 0, 1, 1},     // not split
  };
  for (const TensorSplit& s : cases) {
    CAPTURE(s.whole, s.dim, s.stride, s.parts);
    std::vector<int> owner(s.whole_numel(), -1);
    std::vector<int64_t> slice_index(s.whole_numel(), -1);
    for (int r = 0; r < s.parts; ++r) {
      const std::vector<int64_t> want = brute_slice(s, r);
      REQUIRE(static_cast<int64_t>(want.size()) == s.slice_numel());
      // Every sub-range of the slice, so runs that start and end mid-block are covered.
      for (int64_t b = 0; b < s.slice_numel(); b += 3)
        for (int64_t e = b + 1; e <= s.slice_numel(); e += 5) {
          int64_t at = b;
          for (const TensorSplit::Run& run : s.runs_of_slice(r, b, e)) {
            REQUIRE(run.rank == r);
            REQUIRE(run.slice_begin == at);
            for (int64_t k = 0; k < run.length; ++k)
              REQUIRE(run.whole_begin + k == want[run.slice_begin + k]);
            at += run.length;
          }
          REQUIRE(at == e);
        }
      for (size_t j = 0; j < want.size(); ++j) {
        owner[want[j]] = r;
        slice_index[want[j]] = static_cast<int64_t>(j);
      }
    }
    for (int64_t b = 0; b < s.whole_numel(); b += 2)
      for (int64_t e = b + 1; e <= s.whole_numel(); e += 7) {
        int64_t at = b;
        for (const TensorSplit::Run& run : s.runs_of_whole(b, e)) {
          REQUIRE(run.whole_begin == at);
          for (int64_t k = 0; k < run.length; ++k) {
            REQUIRE(owner[run.whole_begin + k] == run.rank);
            REQUIRE(slice_index[run.whole_begin + k] == run.slice_begin + k);
          }
          at += run.length;
        }
        REQUIRE(at == e);
      }
  }
}

TEST_CASE("tensor split: a dimension the parts do not divide is an error") {
  const TensorSplit bad{{10, 4}, 0, 3, 2};
  REQUIRE_THROWS_WITH(bad.runs_of_whole(0, 4), Catch::Contains("not divisible by stride 3 x 2"));
}
