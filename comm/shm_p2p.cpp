// Point-to-point batches through the group's segment. Each ordered pair of ranks has a channel of
// two chunks (a header naming the message and its size, then up to 64 KiB of it): the sender
// writes a chunk when one is free, the receiver copies it out and frees it, and each rings the
// other's doorbell. A batch moves whatever chunks its transfers allow, pass after pass, and sleeps
// on its own doorbell when none can move: two ranks that list a send and a receive in opposite
// orders both make progress. Transfers to (or from) one peer run in their order, so the n-th send
// from a to b lands in b's n-th receive from a.
#include "shm_group.h"

#include <zero/error.h>

#include <algorithm>
#include <cstring>

namespace zero::detail {
namespace {

struct ChunkHeader {
  uint64_t message_bytes;  // the whole message's
  uint32_t message;        // its number between the pair, in its direction
};

// Whether counter `a` is ahead of `b` (they wrap around).
int32_t ahead(uint32_t a, uint32_t b) {
  return static_cast<int32_t>(a - b);
}

}  // namespace

bool ShmGroup::send_chunk(const P2PTransfer& o, size_t& done) {
  const uint32_t g = sent_chunks_[o.peer];
  Channel& ch = channel(rank_, o.peer);
  if (ahead(g, ch.consumed.load(std::memory_order_acquire)) >= kChunksPerChannel) return false;
  char* c = chunk(rank_, o.peer, g);
  auto* header = reinterpret_cast<ChunkHeader*>(c);
  header->message_bytes = o.bytes;
  header->message = o.message;
  const size_t len = std::min<size_t>(p2p_chunk_bytes(), o.bytes - done);
  std::memcpy(c + kChunkHeaderBytes, static_cast<const char*>(o.data) + done, len);
  ch.written.store(g + 1, std::memory_order_release);
  sent_chunks_[o.peer] = g + 1;
  done += len;
  ring(o.peer);
  return true;
}

bool ShmGroup::recv_chunk(const P2PTransfer& o, size_t& done, const std::string& where) {
  const uint32_t g = received_chunks_[o.peer];
  Channel& ch = channel(o.peer, rank_);
  if (ahead(ch.written.load(std::memory_order_acquire), g) <= 0) return false;
  const char* c = chunk(o.peer, rank_, g);
  const auto* header = reinterpret_cast<const ChunkHeader*>(c);
  ZERO_CHECK(header->message_bytes == o.bytes && header->message == o.message, CommError,
             p2p_transfer_name(where, o), " failed: rank ", o.peer, " sent message ",
             header->message, " of ", header->message_bytes,
             " bytes there (the sizes or the order of the two ranks' batches differ)");
  const size_t len = std::min<size_t>(p2p_chunk_bytes(), o.bytes - done);
  std::memcpy(static_cast<char*>(o.data) + done, c + kChunkHeaderBytes, len);
  ch.consumed.store(g + 1, std::memory_order_release);
  received_chunks_[o.peer] = g + 1;
  done += len;
  ring(o.peer);
  return true;
}

void ShmGroup::p2p(const std::vector<P2PTransfer>& ops, Clock::time_point deadline,
                   std::chrono::milliseconds timeout, const std::string& where) {
  std::vector<size_t> done(ops.size(), 0);
  std::vector<bool> finished(ops.size());
  size_t left = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    finished[i] = ops[i].bytes == 0;  // empty: both sides skip the transfer
    left += finished[i] ? 0 : 1;
  }
  std::vector<char> busy(2 * static_cast<size_t>(size_));
  while (left > 0) {
    const uint32_t bell = my_doorbell();
    bool moved = false;
    std::fill(busy.begin(), busy.end(), 0);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (finished[i]) continue;
      const P2PTransfer& o = ops[i];
      char& earlier = busy[2 * o.peer + (o.kind == P2POp::Kind::kRecv ? 1 : 0)];
      if (earlier) continue;  // an earlier transfer with this peer, this direction, is not done
      while (o.kind == P2POp::Kind::kSend ? send_chunk(o, done[i])
                                          : recv_chunk(o, done[i], where)) {
        moved = true;
        if (done[i] == o.bytes) break;
      }
      if (done[i] == o.bytes) {
        finished[i] = true;
        --left;
      } else {
        earlier = 1;
      }
    }
    if (left == 0 || moved) continue;
    const auto now = Clock::now();
    const P2PTransfer* first = nullptr;
    for (size_t i = 0; i < ops.size() && !first; ++i)
      if (!finished[i]) first = &ops[i];
    if (now >= deadline) throw p2p_timeout(where, *first, timeout);
    for (size_t i = 0; i < ops.size(); ++i)
      if (!finished[i] && peer_exited(ops[i].peer))
        throw CommError(str(p2p_transfer_name(where, ops[i]), " failed: the process of rank ",
                            ops[i].peer, " exited"));
    wait_bell(bell, std::min(deadline, now + std::chrono::milliseconds(100)));
  }
}

}  // namespace zero::detail
