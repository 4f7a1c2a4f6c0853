// Character-level tokenizer and a text corpus that hands each rank its part of the global
// batch: every optimizer step draws the same global batch whatever the world size.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>

namespace gpt {

// One token per distinct byte of the text it was built from, in byte order.
class CharTokenizer {
 public:
  explicit CharTokenizer(const std::string& text);
  int64_t vocab_size() const { return static_cast<int64_t>(chars_.size()); }
  std::vector<int64_t> encode(const std::string& text) const;  // throws on an unknown character
  std::string decode(const std::vector<int64_t>& tokens) const;

 private:
  std::string chars_;
  std::array<int16_t, 256> index_{};
};

std::string read_text_file(const std::string& path);  // throws std::runtime_error

struct Batch {
  at::Tensor tokens;   // int64 [rows, context]
  at::Tensor targets;  // int64 [rows, context]: tokens shifted by one
};

class TextDataset {
 public:
  TextDataset(std::vector<int64_t> tokens, int64_t context, uint64_t seed);
  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }

  // Start offsets of the global batch of optimizer step `step`: `global_rows` windows drawn
  // uniformly by a generator seeded from (seed, step).
  std::vector<int64_t> global_offsets(int64_t step, int64_t global_rows) const;

  // The rows of `rank` for micro-step `micro_step` of optimizer step `step`: the global batch
  // has micro_batch * accumulation * world_size rows, and (micro_step, rank) takes the block of
  // micro_batch rows at (micro_step * world_size + rank) * micro_batch.
  Batch batch(int64_t step, int64_t micro_step, int rank, int world_size, int64_t micro_batch,
              int64_t accumulation) const;

  Batch rows(const std::vector<int64_t>& offsets) const;

  // The text as non-overlapping windows (window i starts at token i x context): their number,
  // and the start offsets of some of them (for zero::DistributedSampler's indices).
  int64_t num_windows() const;
  std::vector<int64_t> window_offsets(const std::vector<int64_t>& windows) const;

 private:
  std::vector<int64_t> tokens_;
  int64_t context_;
  uint64_t seed_;
};

}  // namespace gpt
