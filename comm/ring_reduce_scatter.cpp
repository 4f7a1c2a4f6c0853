// Reduce-scatter as a pipelined ring over Gloo unbound buffers (Gloo's own
// ReduceScatterHalvingDoubling is an old-style algorithm): each rank moves (N-1)/N of the data
// and holds kReceiveSegments segments of scratch beside its input.
#include "gloo_communicator.h"

#include <zero/error.h>

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include <algorithm>
#include <cstring>

namespace zero::detail {
namespace {

constexpr uint8_t kRingReduceScatterSlotPrefix = 0x31;  // outside Gloo's own prefixes (0x01-0x08)
constexpr size_t kSegmentBytes = size_t{1} << 20;
constexpr size_t kReceiveSegments = 4;

struct Segments {
  size_t element_bytes;
  size_t per_segment;  // elements per segment
  size_t count(int64_t elements) const { return (elements + per_segment - 1) / per_segment; }
  size_t begin(size_t j) const { return j * per_segment; }
  size_t length(int64_t elements, size_t j) const {
    return std::min<size_t>(per_segment, elements - j * per_segment);
  }
};

}  // namespace

// Step s (0..N-2): rank r sends its partial sum of chunk (r-s-1) to r+1 and receives the
// partial sum of chunk (r-s-2) from r-1, segment by segment. Each received segment is added to
// this rank's own part of that chunk where it lies in the work buffer (the input itself when it
// may be consumed), and forwarded from there at once (pipelining); the last step adds into
// `output`. Chunk r-1 is sent unchanged at step 0 and every other chunk is written once, so no
// send reads a region that is being written. Receives land in kReceiveSegments buffers of one
// segment each, posted in the order the sends arrive (Gloo matches a pair's receives on one slot
// first in, first out): the sender never waits, so the ring cannot deadlock, and the rank holds
// a few segments, not chunks.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, void* input, void* output,
                         const std::vector<int64_t>& counts, size_t element_bytes,
                         void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                         std::chrono::milliseconds timeout, InputUse use,
                         std::vector<char>& scratch) {
  const int n = context->size, r = context->rank;
  std::vector<size_t> offsets(n + 1, 0);
  for (int i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + counts[i];
  if (n == 1) {
    if (counts[0] > 0 && output != input) std::memcpy(output, input, counts[0] * element_bytes);
    return;
  }
  if (offsets[n] == 0) return;

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto remaining = [&] {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    return std::max(left, std::chrono::milliseconds(1));
  };
  const Segments seg{element_bytes, std::max<size_t>(1, kSegmentBytes / element_bytes)};
  const size_t segment_bytes = seg.per_segment * element_bytes;
  const size_t receive_bytes = kReceiveSegments * segment_bytes;
  const size_t total_bytes = offsets[n] * element_bytes;
  const bool keep = use == InputUse::kKeep;
  if (scratch.size() < receive_bytes + (keep ? total_bytes : 0))
    scratch.resize(receive_bytes + (keep ? total_bytes : 0));
  char* work = static_cast<char*>(input);
  if (keep) {
    work = scratch.data() + receive_bytes;
    std::memcpy(work, input, total_bytes);
  }

  auto chunk_of = [&](int k) { return ((k % n) + n) % n; };
  struct Piece {
    int chunk;
    size_t segment;
    bool last;  // of the final step: lands in `output`
  };
  std::vector<Piece> pieces;  // this rank's receives, in arrival order
  for (int s = 0; s < n - 1; ++s) {
    const int c = chunk_of(r - s - 2);
    for (size_t j = 0; j < seg.count(counts[c]); ++j) pieces.push_back({c, j, s == n - 2});
  }

  auto work_buf = context->createUnboundBuffer(work, total_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> receives[kReceiveSegments];
  for (size_t b = 0; b < kReceiveSegments; ++b)
    receives[b] = context->createUnboundBuffer(scratch.data() + b * segment_bytes, segment_bytes);
  const gloo::Slot slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  auto bytes_of = [&](const Piece& p) {
    return seg.length(counts[p.chunk], p.segment) * element_bytes;
  };
  auto post = [&](size_t k) {
    receives[k % kReceiveSegments]->recv(prev, slot, 0, bytes_of(pieces[k]));
  };
  for (size_t k = 0; k < std::min(kReceiveSegments, pieces.size()); ++k) post(k);

  size_t pending_sends = 0;
  const int first = chunk_of(r - 1);  // step 0 sends this rank's own part unchanged
  for (size_t j = 0; j < seg.count(counts[first]); ++j, ++pending_sends)
    work_buf->send(next, slot, (offsets[first] + seg.begin(j)) * element_bytes,
                   seg.length(counts[first], j) * element_bytes);

  const char* in = static_cast<const char*>(input);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const Piece& p = pieces[k];
    gloo::transport::UnboundBuffer* received = receives[k % kReceiveSegments].get();
    if (!received->waitRecv(remaining())) throw CommError("ring reduce-scatter: receive aborted");
    const size_t at = (offsets[p.chunk] + seg.begin(p.segment)) * element_bytes;
    char* dst =
        p.last ? static_cast<char*>(output) + seg.begin(p.segment) * element_bytes : work + at;
    reduce(dst, received->ptr, in + at, seg.length(counts[p.chunk], p.segment));
    if (k + kReceiveSegments < pieces.size()) post(k + kReceiveSegments);
    if (!p.last) {
      work_buf->send(next, slot, at, bytes_of(p));
      ++pending_sends;
    }
  }
  for (; pending_sends > 0; --pending_sends) work_buf->waitSend(remaining());
}

}  // namespace zero::detail
