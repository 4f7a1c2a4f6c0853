// The shared-memory transport for the ranks of one group that share a host: one POSIX
// shared-memory segment per group (owner-only, unlinked as soon as every rank mapped it, so a
// crash leaves no name behind), per-rank slots the collectives stage their data through, and a
// barrier of per-rank step counters that waits on futexes (no busy core while a peer computes).
// The collectives run in rounds of one slot: every rank copies in what the others need, reduces
// its own share of the round with the reduction kernels (in rank order, so every rank's result
// is the same bits), and copies out what the others reduced. Two slots per rank alternate, so a
// round needs one barrier (all-reduce: two).
#pragma once

#include <zero/comm/communicator.h>

#include "p2p.h"
#include "reduce_kernels.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace zero::detail {

// A wait of the shared-memory barrier that did not end: a peer never came within the deadline
// (`exited` empty) or its process ended while the others waited. The backend's door turns it into
// a TimeoutError / CommError with the collective's context.
struct ShmWaitError : std::runtime_error {
  ShmWaitError(std::vector<int> missing, std::vector<int> exited)
      : std::runtime_error("a shared-memory wait did not end"),
        missing(std::move(missing)),
        exited(std::move(exited)) {}
  std::vector<int> missing;  // ranks of the group that had not reached the wait
  std::vector<int> exited;   // those of them whose process is gone
};

// Segment names: "/zero-shm-<uid>-<creator pid>-<n>". Removes the ones of this user whose creator
// is no longer running (a creator that died between creating and unlinking one); returns their
// names.
std::vector<std::string> remove_orphan_segments();

// A plain segment of `bytes` (zero-filled, owner-only) named as the groups' segments are, so the
// orphan sweep covers it: memory the ranks of a group share (host_shared_tensor). create returns
// the mapping and sets `name`; attach maps an existing one of exactly `bytes`. Both throw
// CommError with the reason.
void* create_shared_segment(size_t bytes, std::string& name);
void* attach_shared_segment(const std::string& name, size_t bytes);

class ShmGroup {
 public:
  using Clock = std::chrono::steady_clock;

  // Rank 0 creates a segment for `size` ranks with `slot_bytes` per slot; the others attach
  // (open_existing) to the name rank 0 gave them and check its nonce. Throws CommError with the
  // reason when the segment cannot be made or mapped.
  static std::unique_ptr<ShmGroup> create(int size, int64_t slot_bytes);
  static std::unique_ptr<ShmGroup> attach(const std::string& name, uint64_t nonce, int rank,
                                          int size);
  ~ShmGroup();
  ShmGroup(const ShmGroup&) = delete;
  ShmGroup& operator=(const ShmGroup&) = delete;

  const std::string& name() const { return name_; }
  uint64_t nonce() const;
  int64_t slot_bytes() const;
  // Once every rank attached: removes the name (the mapping lives on until the last rank unmaps)
  // and notes which peers' processes this one can watch (those in its pid namespace: a pid from
  // another namespace may name an unrelated process here).
  void all_attached();

  // The collectives (the Communicator's contracts, on raw buffers of `n` / counts elements of
  // `es` bytes). They wait until `deadline` at most and throw ShmWaitError otherwise.
  void all_reduce(void* data, size_t n, at::ScalarType dtype, ReduceOp op,
                  Clock::time_point deadline);
  void reduce_scatter_v(const void* input, void* output, const std::vector<int64_t>& counts,
                        at::ScalarType dtype, ReduceOp op, Clock::time_point deadline);
  void all_gather_v(const void* input, void* output, const std::vector<int64_t>& counts, size_t es,
                    Clock::time_point deadline);
  void broadcast(void* data, size_t bytes, int root, Clock::time_point deadline);
  void barrier(Clock::time_point deadline);
  // A point-to-point batch (shm_p2p.cpp): per ordered pair of ranks a channel of two chunks in
  // the segment; the batch's transfers progress together, so opposite orders cannot deadlock.
  // Throws TimeoutError / CommError in the Gloo transport's words (`where` + the transfer).
  void p2p(const std::vector<P2PTransfer>& ops, Clock::time_point deadline,
           std::chrono::milliseconds timeout, const std::string& where);

 private:
  struct Header;
  struct RankControl;
  struct alignas(64) Channel {
    std::atomic<uint32_t> written;               // chunks the sender has written so far
    alignas(64) std::atomic<uint32_t> consumed;  // chunks the receiver has read so far
  };
  static constexpr int kChunksPerChannel = 2;
  static constexpr size_t kChunkHeaderBytes = 64;
  static constexpr int64_t kP2PChunkBytes = 64 << 10;
  ShmGroup(std::string name, void* base, size_t bytes, int rank, int size);

  RankControl& control(int rank) const;
  char* slot(int rank, int buffer) const;
  // Publishes this rank's next step and waits until every rank reached it.
  void sync(Clock::time_point deadline);
  void wait_for(int peer, uint32_t step, Clock::time_point deadline);
  bool peer_exited(int peer) const;
  Channel& channel(int from, int to) const;
  char* chunk(int from, int to, uint32_t index) const;  // its header, then its data
  int64_t p2p_chunk_bytes() const;
  void ring(int rank);  // a channel to or from `rank` moved
  uint32_t my_doorbell() const;
  // Returns once this rank's doorbell is no longer `seen`, or at `until`.
  void wait_bell(uint32_t seen, Clock::time_point until);
  // One chunk of transfer `o` (of which `done` bytes moved) if its channel allows; false if not.
  bool send_chunk(const P2PTransfer& o, size_t& done);
  bool recv_chunk(const P2PTransfer& o, size_t& done, const std::string& where);
  int next_buffer() { return buffer_ ^= 1; }
  // dst = src_0 op src_1 op ... in rank order (n elements of es bytes; dst may alias any source).
  void reduce_ranks(void* dst, const std::vector<const void*>& srcs, size_t n, size_t es,
                    ReduceFn fn) const;

  std::string name_;
  void* base_ = nullptr;
  size_t bytes_ = 0;
  int rank_ = 0, size_ = 1;
  uint32_t step_ = 0;  // this rank's barrier steps so far
  int buffer_ = 0;     // which of its two slots the last round used
  bool unlinked_ = false;
  std::vector<bool> watch_pid_;  // peers whose pid this process can see (same pid namespace)
  std::vector<uint32_t> sent_chunks_, received_chunks_;  // per peer, over the job
  int64_t spin_ns_ = 20000;  // how long a wait spins before it sleeps on the futex
};

}  // namespace zero::detail
