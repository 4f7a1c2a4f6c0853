// The shared-memory collectives, in rounds of one slot (shm_group.h). A rank never stages the
// part it reduces itself: it reads that part from its own buffer and the others' from their
// slots, so each round copies (R-1)/R of a slot in and out per rank.
#include "shm_group.h"

#include <algorithm>
#include <cstring>

namespace zero::detail {
namespace {

// [lo, hi) of part j when n elements are split among `parts` as evenly as they go.
int64_t part_begin(int64_t n, int j, int parts) {
  return n * j / parts;
}

int64_t clamp_len(int64_t count, int64_t base, int64_t cap) {
  return std::clamp<int64_t>(count - base, 0, cap);
}

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t j = 1; j < counts.size(); ++j) offsets[j] = offsets[j - 1] + counts[j - 1];
  return offsets;
}

int64_t rounds_for(const std::vector<int64_t>& counts, int64_t cap) {
  int64_t rounds = 0;
  for (int64_t c : counts) rounds = std::max(rounds, (c + cap - 1) / cap);
  return rounds;
}

}  // namespace

void ShmGroup::reduce_ranks(void* dst, const std::vector<const void*>& srcs, size_t n, size_t es,
                            ReduceFn fn) const {
  auto* out = static_cast<char*>(dst);
  if (srcs.size() == 2) return fn(out, srcs[0], srcs[1], n);  // dst may alias either
  // More sources: accumulate a block at a time in L1, then store it, so dst may alias any source.
  alignas(64) char acc[8192];
  const size_t block = sizeof(acc) / es;
  for (size_t at = 0; at < n; at += block) {
    const size_t len = std::min(block, n - at);
    auto src = [&](size_t k) { return static_cast<const char*>(srcs[k]) + at * es; };
    fn(acc, src(0), src(1), len);
    for (size_t k = 2; k < srcs.size(); ++k) fn(acc, acc, src(k), len);
    std::memcpy(out + at * es, acc, len * es);
  }
}

void ShmGroup::all_reduce(void* data, size_t n, at::ScalarType dtype, ReduceOp op,
                          Clock::time_point deadline) {
  const size_t es = dtype_bytes(dtype);
  const ReduceFn fn = reduce_fn(dtype, op);
  const int64_t cap = slot_bytes() / static_cast<int64_t>(es);
  auto* d = static_cast<char*>(data);
  std::vector<const void*> srcs(size_);
  for (int64_t off = 0; off < static_cast<int64_t>(n); off += cap) {
    const int64_t m = std::min<int64_t>(cap, static_cast<int64_t>(n) - off);
    const int b = next_buffer();
    char* mine = slot(rank_, b);
    auto lo = [&](int j) { return part_begin(m, j, size_); };
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        std::memcpy(mine + lo(j) * es, d + (off + lo(j)) * es, (lo(j + 1) - lo(j)) * es);
    sync(deadline);
    const int64_t my_lo = lo(rank_), my_len = lo(rank_ + 1) - my_lo;
    for (int r = 0; r < size_; ++r)
      srcs[r] = r == rank_ ? d + (off + my_lo) * es : slot(r, b) + my_lo * es;
    char* result = mine + my_lo * es;
    reduce_ranks(result, srcs, my_len, es, fn);
    if (op == ReduceOp::kAvg) divide_inplace(result, my_len, dtype, size_);
    std::memcpy(d + (off + my_lo) * es, result, my_len * es);
    sync(deadline);
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        std::memcpy(d + (off + lo(j)) * es, slot(j, b) + lo(j) * es, (lo(j + 1) - lo(j)) * es);
  }
}

void ShmGroup::reduce_scatter_v(const void* input, void* output, const std::vector<int64_t>& counts,
                                at::ScalarType dtype, ReduceOp op, Clock::time_point deadline) {
  const size_t es = dtype_bytes(dtype);
  const ReduceFn fn = reduce_fn(dtype, op);
  // Slot j of a rank's buffer holds, each round, its piece of rank j's segment.
  const int64_t part_bytes = slot_bytes() / size_ / 64 * 64;
  const int64_t cap = part_bytes / static_cast<int64_t>(es);
  const std::vector<int64_t> offsets = offsets_of(counts);
  const auto* in = static_cast<const char*>(input);
  auto* out = static_cast<char*>(output);
  std::vector<const void*> srcs(size_);
  const int64_t rounds = rounds_for(counts, cap);
  for (int64_t t = 0; t < rounds; ++t) {
    const int b = next_buffer();
    const int64_t base = t * cap;
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        std::memcpy(slot(rank_, b) + j * part_bytes, in + (offsets[j] + base) * es,
                    clamp_len(counts[j], base, cap) * es);
    sync(deadline);
    const int64_t len = clamp_len(counts[rank_], base, cap);
    if (len == 0) continue;
    for (int r = 0; r < size_; ++r)
      srcs[r] = r == rank_ ? in + (offsets[rank_] + base) * es : slot(r, b) + rank_ * part_bytes;
    reduce_ranks(out + base * es, srcs, len, es, fn);
    if (op == ReduceOp::kAvg) divide_inplace(out + base * es, len, dtype, size_);
  }
}

void ShmGroup::all_gather_v(const void* input, void* output, const std::vector<int64_t>& counts,
                            size_t es, Clock::time_point deadline) {
  const int64_t cap = slot_bytes() / static_cast<int64_t>(es);
  const std::vector<int64_t> offsets = offsets_of(counts);
  const auto* in = static_cast<const char*>(input);
  auto* out = static_cast<char*>(output);
  if (out + offsets[rank_] * es != in)
    std::memmove(out + offsets[rank_] * es, in, counts[rank_] * es);
  const int64_t rounds = rounds_for(counts, cap);
  for (int64_t t = 0; t < rounds; ++t) {
    const int b = next_buffer();
    const int64_t base = t * cap;
    std::memcpy(slot(rank_, b), in + base * es, clamp_len(counts[rank_], base, cap) * es);
    sync(deadline);
    for (int j = 0; j < size_; ++j)
      if (j != rank_)
        std::memcpy(out + (offsets[j] + base) * es, slot(j, b),
                    clamp_len(counts[j], base, cap) * es);
  }
}

void ShmGroup::broadcast(void* data, size_t bytes, int root, Clock::time_point deadline) {
  const int64_t cap = slot_bytes();
  auto* d = static_cast<char*>(data);
  for (int64_t base = 0; base < static_cast<int64_t>(bytes); base += cap) {
    const int b = next_buffer();
    const int64_t len = std::min<int64_t>(cap, static_cast<int64_t>(bytes) - base);
    if (rank_ == root) std::memcpy(slot(root, b), d + base, len);
    sync(deadline);
    if (rank_ != root) std::memcpy(d + base, slot(root, b), len);
  }
}

void ShmGroup::barrier(Clock::time_point deadline) {
  sync(deadline);
}

}  // namespace zero::detail
