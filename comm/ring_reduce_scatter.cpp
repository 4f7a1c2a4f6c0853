// Reduce-scatter as a pipelined ring over Gloo unbound buffers (Gloo's own
// ReduceScatterHalvingDoubling is an old-style algorithm): each rank moves (N-1)/N of the data.
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
// partial sum of chunk (r-s-2) from r-1, adding its own input to it segment by segment; each
// reduced segment is forwarded at once (pipelining). The last step lands chunk r in `output`.
void ring_reduce_scatter(const std::shared_ptr<gloo::Context>& context, const void* input,
                         void* output, const std::vector<int64_t>& counts, size_t element_bytes,
                         void (*reduce)(void*, const void*, const void*, size_t), uint32_t tag,
                         std::chrono::milliseconds timeout, std::vector<char>& scratch) {
  const int n = context->size, r = context->rank;
  std::vector<size_t> offsets(n + 1, 0);
  for (int i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + counts[i];
  const char* in = static_cast<const char*>(input);
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
  const int64_t max_count = *std::max_element(counts.begin(), counts.end());
  const size_t buf_bytes = max_count * element_bytes;
  if (scratch.size() < 2 * buf_bytes) scratch.resize(2 * buf_bytes);

  auto in_buf = context->createUnboundBuffer(const_cast<char*>(in), offsets[n] * element_bytes);
  std::unique_ptr<gloo::transport::UnboundBuffer> bufs[2] = {
      context->createUnboundBuffer(scratch.data(), std::max<size_t>(buf_bytes, 1)),
      context->createUnboundBuffer(scratch.data() + buf_bytes, std::max<size_t>(buf_bytes, 1))};
  auto out_buf =
      counts[r] > 0 ? context->createUnboundBuffer(output, counts[r] * element_bytes) : nullptr;
  size_t pending_sends[2] = {0, 0};
  size_t pending_in_sends = 0;
  const gloo::Slot slot = gloo::Slot::build(kRingReduceScatterSlotPrefix, tag);
  const int next = (r + 1) % n, prev = (r - 1 + n) % n;
  auto chunk_of = [&](int k) { return ((k % n) + n) % n; };

  for (int s = 0; s < n - 1; ++s) {
    const bool last = s == n - 2;
    const int c = chunk_of(r - s - 2);
    const size_t segments = seg.count(counts[c]);
    gloo::transport::UnboundBuffer* dst = last ? out_buf.get() : bufs[s % 2].get();
    if (segments > 0) {
      if (!last) {  // this buffer may still be feeding the sends of step s-1
        for (; pending_sends[s % 2] > 0; --pending_sends[s % 2]) bufs[s % 2]->waitSend(remaining());
      }
      for (size_t j = 0; j < segments; ++j)  // receives first: their ready notices go out early
        dst->recv(prev, slot, seg.begin(j) * element_bytes,
                  seg.length(counts[c], j) * element_bytes);
    }
    if (s == 0) {  // step 0 sends straight from the input
      const int sc = chunk_of(r - 1);
      for (size_t j = 0; j < seg.count(counts[sc]); ++j) {
        in_buf->send(next, slot, (offsets[sc] + seg.begin(j)) * element_bytes,
                     seg.length(counts[sc], j) * element_bytes);
        ++pending_in_sends;
      }
    }
    if (segments == 0) continue;
    char* dst_ptr = static_cast<char*>(dst->ptr);
    for (size_t j = 0; j < segments; ++j) {
      if (!dst->waitRecv(remaining())) throw CommError("ring reduce-scatter: receive aborted");
      char* p = dst_ptr + seg.begin(j) * element_bytes;
      reduce(p, p, in + (offsets[c] + seg.begin(j)) * element_bytes, seg.length(counts[c], j));
      if (!last) {
        dst->send(next, slot, seg.begin(j) * element_bytes,
                  seg.length(counts[c], j) * element_bytes);
        ++pending_sends[s % 2];
      }
    }
  }
  for (; pending_in_sends > 0; --pending_in_sends) in_buf->waitSend(remaining());
  for (int b = 0; b < 2; ++b)
    for (; pending_sends[b] > 0; --pending_sends[b]) bufs[b]->waitSend(remaining());
}

}  // namespace zero::detail
