// Tokenizer and dataset of data.h. Offsets come from std::mt19937_64 with a fixed mixing of
// (seed, step), so a run is reproducible and independent of the number of ranks.
#include "data.h"

#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

#include <ATen/ATen.h>

namespace gpt {

CharTokenizer::CharTokenizer(const std::string& text) {
  std::array<bool, 256> present{};
  for (unsigned char c : text) present[c] = true;
  index_.fill(-1);
  for (int c = 0; c < 256; ++c) {
    if (!present[c]) continue;
    index_[c] = static_cast<int16_t>(chars_.size());
    chars_.push_back(static_cast<char>(c));
  }
  if (chars_.empty()) throw std::runtime_error("CharTokenizer: empty text");
}

std::vector<int64_t> CharTokenizer::encode(const std::string& text) const {
  std::vector<int64_t> out;
  out.reserve(text.size());
  for (unsigned char c : text) {
    if (index_[c] < 0)
      throw std::runtime_error("CharTokenizer: character " + std::to_string(c) +
                               " not in vocabulary");
    out.push_back(index_[c]);
  }
  return out;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& tokens) const {
  std::string out;
  out.reserve(tokens.size());
  for (int64_t t : tokens) {
    if (t < 0 || t >= vocab_size())
      throw std::runtime_error("CharTokenizer: token " + std::to_string(t) + " out of range");
    out.push_back(chars_[static_cast<size_t>(t)]);
  }
  return out;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open text file '" + path + "'");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TextDataset::TextDataset(std::vector<int64_t> tokens, int64_t context, uint64_t seed)
    : tokens_(std::move(tokens)), context_(context), seed_(seed) {
  if (context_ <= 0 || num_tokens() < context_ + 2)
    throw std::runtime_error("TextDataset: " + std::to_string(num_tokens()) +
                             " tokens are too few for a context of " + std::to_string(context_));
}

std::vector<int64_t> TextDataset::global_offsets(int64_t step, int64_t global_rows) const {
  std::mt19937_64 gen(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(step) + 1);
  std::uniform_int_distribution<int64_t> pick(0, num_tokens() - context_ - 1);
  std::vector<int64_t> offsets(static_cast<size_t>(global_rows));
  for (auto& o : offsets) o = pick(gen);
  return offsets;
}

Batch TextDataset::rows(const std::vector<int64_t>& offsets) const {
  const int64_t n = static_cast<int64_t>(offsets.size());
  auto tokens = at::empty({n, context_}, at::kLong);
  auto targets = at::empty({n, context_}, at::kLong);
  int64_t* x = tokens.data_ptr<int64_t>();
  int64_t* y = targets.data_ptr<int64_t>();
  for (int64_t r = 0; r < n; ++r)
    for (int64_t t = 0; t < context_; ++t) {
      x[r * context_ + t] = tokens_[static_cast<size_t>(offsets[r] + t)];
      y[r * context_ + t] = tokens_[static_cast<size_t>(offsets[r] + t + 1)];
    }
  return {tokens, targets};
}

Batch TextDataset::batch(int64_t step, int64_t micro_step, int rank, int world_size,
                         int64_t micro_batch, int64_t accumulation) const {
  if (rank < 0 || rank >= world_size || micro_step < 0 || micro_step >= accumulation ||
      micro_batch <= 0)
    throw std::runtime_error("TextDataset::batch: bad rank/micro-step/batch arguments");
  const auto all = global_offsets(step, micro_batch * accumulation * world_size);
  const auto first = all.begin() + (micro_step * world_size + rank) * micro_batch;
  return rows(std::vector<int64_t>(first, first + micro_batch));
}

}  // namespace gpt

namespace gpt {

int64_t TextDataset::num_windows() const {
  // A window reads context + 1 tokens (its targets are shifted by one).
  return (num_tokens() - 1) / context_;
}

std::vector<int64_t> TextDataset::window_offsets(const std::vector<int64_t>& windows) const {
  std::vector<int64_t> offsets;
  for (int64_t w : windows) {
    if (w < 0 || w >= num_windows())
      throw std::runtime_error("TextDataset::window_offsets: window out of range");
    offsets.push_back(w * context_);
  }
  return offsets;
}

}  // namespace gpt
