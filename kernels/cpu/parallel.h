// Splitting one large buffer over the CPU kernels' threads: a small persistent pool (no
// OpenMP) whose workers take contiguous, cache-line aligned blocks; small buffers stay inline.
#pragma once

#include <cstdint>
#include <functional>

namespace zero::kernels::detail {

// Below this many elements per block a thread costs more than it brings.
constexpr int64_t kMinChunkNumel = int64_t{1} << 16;
// Blocks per thread: threads take blocks from a shared counter, so a thread that the OS
// preempts delays the call by one block, not by its whole share.
constexpr int kBlocksPerThread = 4;

// Runs fn(block, begin, end) over a partition of [0, numel) into parallel_chunk_count()
// blocks (starts are multiples of 64 elements), on up to `threads` threads (the calling one
// included), and returns when all are done. Which thread runs which block varies; the
// partition does not. When another call holds the pool, runs everything inline as one block.
// Returns the number of blocks used (fn is not called when numel == 0).
int parallel_for(int64_t numel, int threads,
                 const std::function<void(int chunk, int64_t begin, int64_t end)>& fn);

// The block count parallel_for uses for `numel` and `threads` (for sizing partial sums).
int parallel_chunk_count(int64_t numel, int threads);

}  // namespace zero::kernels::detail
