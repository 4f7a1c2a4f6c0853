// Asynchronous reads and writes of swap files with io_uring: the NVMe layer of ZeRO-Infinity.
// A request is cut into blocks spread over intra_op_parallelism rings, each driven by its own
// worker thread; read()/write() return a ticket at once and wait() blocks the host until done.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <zero/offload/aligned_buffer.h>
#include <zero/offload/swap_dir.h>

namespace zero::offload {

// The ds_config "aio" section. Validated by AioEngine (ConfigError naming the aio.* key).
struct AioOptions {
  // aio.block_size: a request is split into blocks of this size
  int64_t block_size_bytes = 1048576;
  // aio.queue_depth: blocks in flight per ring
  int queue_depth = 8;
  // aio.intra_op_parallelism: rings (each with its own thread) one request is split over
  int intra_op_parallelism = 1;
  // aio.single_submit: one io_uring_submit per block instead of batches
  bool single_submit = false;
  // aio.overlap_events: submit the next blocks as completions arrive; false: submit a batch,
  // wait for all of it, then the next
  bool overlap_events = true;
};

namespace detail {
struct AioShared;
class AioRing;
}  // namespace detail

// Usage: the optimizer pipeline's thread issues read()/write() and later wait()s on the tickets.
// Every member may be called from any thread (state is under one mutex), but requests are
// ordered only by the caller: two overlapping requests in flight at once race, as two pwrite
// calls from two threads would. The buffer and the SwapFile of a request must stay alive, and
// the buffer untouched, until its ticket is waited for (or the engine destroyed).
class AioEngine {
 public:
  // Starts intra_op_parallelism rings of queue_depth entries, each with its worker thread.
  // Throws ConfigError for options out of range (naming the aio.* key) and IoError when
  // io_uring_queue_init fails (naming errno, e.g. sysctl kernel.io_uring_disabled).
  AioEngine(const AioOptions& options, int rank);
  // Waits for everything issued, in flight or queued; never throws. Errors not yet reported
  // by a wait() are dropped.
  ~AioEngine();
  AioEngine(const AioEngine&) = delete;
  AioEngine& operator=(const AioEngine&) = delete;

  using Ticket = uint64_t;
  // buf, offset and bytes must be multiples of kIoAlign (UsageError otherwise); bytes > 0.
  // Return at once: the request is queued to the rings' threads. Do not block the host.
  Ticket read(const SwapFile& file, int64_t offset, void* buf, int64_t bytes);
  Ticket write(const SwapFile& file, int64_t offset, const void* buf, int64_t bytes);

  // Blocks the host until every block of the ticket completed. A failed block (or a short
  // transfer that cannot go on) is an IoError: "rank R: io_uring write of /p/f at offset O
  // (N bytes): No space left on device (errno 28) ...". A ticket's error is thrown once; waiting
  // again on a finished ticket returns at once. Other tickets are unaffected.
  void wait(Ticket ticket);
  // Blocks until every issued ticket completed; throws the first error of those not yet waited
  // for (with how many others failed). Every ticket counts as waited for afterwards.
  void wait_all();
  // True when the ticket finished (successfully or not) or was already waited for. Never blocks.
  bool is_completed(Ticket ticket) const;

  // Bytes of completed blocks, counted when the kernel reports them done.
  int64_t bytes_read() const;
  int64_t bytes_written() const;
  const AioOptions& options() const;
  int rank() const;

 private:
  Ticket submit(bool is_write, const SwapFile& file, int64_t offset, void* buf, int64_t bytes);

  std::unique_ptr<detail::AioShared> shared_;
  std::vector<std::unique_ptr<detail::AioRing>> rings_;
};

// "" when io_uring works on this kernel (a ring can be set up, READ/WRITE are supported and a
// NOP completes), else the reason. For `zero report`.
std::string io_uring_unavailable_reason();

}  // namespace zero::offload
