// AioEngine (aio.h): requests cut into blocks, spread round-robin over the rings; each ring's
// worker thread keeps at most queue_depth blocks in flight, resubmits short and EAGAIN/EINTR
// transfers, and reports every finished block to the shared ticket table that wait() watches.
#include <zero/error.h>
#include <zero/offload/aio.h>

#include <liburing.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "sys_util.h"

namespace zero::offload {

using Ticket = AioEngine::Ticket;

namespace detail {
namespace {
constexpr int kMaxRetries = 1000;                     // EAGAIN/EINTR completions of one block
constexpr int64_t kMaxBlockBytes = int64_t{1} << 30;  // one SQE moves at most 2^32-1 bytes
constexpr int kMaxQueueDepth = 4096;
constexpr int kMaxParallelism = 256;

std::string io_uring_disabled_hint(int err) {
  std::string value;
  if ((err == EPERM || err == ENOSYS) &&
      read_small_file("/proc/sys/kernel/io_uring_disabled", &value)) {
    while (!value.empty() && (value.back() == '\n' || value.back() == ' ')) value.pop_back();
    if (value != "0")
      return "; sysctl kernel.io_uring_disabled = " + value +
             " forbids io_uring here (set it to 0, or offload to device \"cpu\")";
  }
  if (err == ENOSYS) return "; this kernel or its seccomp filter has no io_uring";
  if (err == ENOMEM) return "; the locked-memory limit (ulimit -l) may be too low";
  return "";
}
}  // namespace

// What all blocks of one request share: for the error messages and the ticket table.
struct AioRequest {
  Ticket ticket = 0;
  bool is_write = false;
  int fd = -1;
  std::string path;
  int64_t offset = 0, bytes = 0;
};

struct AioBlock {
  std::shared_ptr<const AioRequest> request;
  int64_t offset = 0;       // where the rest of this block goes (advanced after a short transfer)
  char* buf = nullptr;      // ditto in memory
  int64_t left_bytes = 0;   // still to transfer
  int64_t block_bytes = 0;  // the whole block, for the byte counters
  int retries = 0;
};

struct TicketState {
  int64_t blocks_left = 0;
  std::string error;        // of the first failed block
  int64_t more_failed = 0;  // other failed blocks of the same request
};

// The ticket table: unfinished tickets, and finished ones whose error is not yet reported.
// A ticket that finished without error leaves the table at once.
struct AioShared {
  AioOptions options;
  int rank = 0;
  mutable std::mutex mu;
  std::condition_variable done_cv;
  std::unordered_map<Ticket, TicketState> tickets;
  int64_t unfinished = 0;
  Ticket next_ticket = 1;
  std::atomic<int64_t> bytes_read{0}, bytes_written{0};

  void finish_block(const AioBlock& block, const std::string& error) {
    if (error.empty()) (block.request->is_write ? bytes_written : bytes_read) += block.block_bytes;
    std::lock_guard<std::mutex> lock(mu);
    auto it = tickets.find(block.request->ticket);
    if (it == tickets.end()) {  // cannot happen: a ticket leaves the table after its last block
      std::fprintf(stderr, "zero offload: internal error: block of unknown ticket %llu\n",
                   static_cast<unsigned long long>(block.request->ticket));
      std::abort();
    }
    TicketState& state = it->second;
    if (!error.empty()) {
      if (state.error.empty())
        state.error = error;
      else
        ++state.more_failed;
    }
    if (--state.blocks_left == 0) {
      --unfinished;
      if (state.error.empty()) tickets.erase(it);
      done_cv.notify_all();
    }
  }

  std::string block_error(const AioBlock& b, const std::string& why) const {
    const AioRequest& r = *b.request;
    return ::zero::detail::str("rank ", rank, ": io_uring ", r.is_write ? "write" : "read", " of ",
                               r.path, " at offset ", b.offset, " (", b.left_bytes,
                               " bytes): ", why, "; in a request of ", r.bytes, " bytes at offset ",
                               r.offset);
  }
};

// One io_uring and the worker thread that owns it.
class AioRing {
 public:
  AioRing(AioShared* shared, int index) : shared_(shared), index_(index) {
    const int depth = shared->options.queue_depth;
    int rc = io_uring_queue_init(static_cast<unsigned>(depth), &ring_, 0);
    if (rc < 0)
      throw IoError(::zero::detail::str("rank ", shared->rank, ": io_uring_queue_init(", depth,
                                        " entries) for aio ring ", index,
                                        " failed: ", errno_text(-rc), io_uring_disabled_hint(-rc)));
    try {
      thread_ = std::thread([this] { run(); });
    } catch (...) {
      io_uring_queue_exit(&ring_);
      throw;
    }
  }

  // Drains the queue and what is in flight, then closes the ring.
  ~AioRing() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
    io_uring_queue_exit(&ring_);
  }

  void enqueue(std::vector<AioBlock*>& blocks) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.insert(queue_.end(), blocks.begin(), blocks.end());
    }
    blocks.clear();
    cv_.notify_one();
  }

 private:
  void run() {
    const AioOptions& opt = shared_->options;
    const size_t depth = static_cast<size_t>(opt.queue_depth);
    std::deque<AioBlock*> retry;  // short or EAGAIN transfers: resubmitted before new blocks
    std::vector<AioBlock*> batch;
    size_t in_flight = 0;
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (in_flight == 0 && retry.empty())
          cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (in_flight == 0 && retry.empty() && queue_.empty()) return;  // stopped and drained
        // Without overlap_events a batch is submitted only once the previous one is all done.
        if (opt.overlap_events || in_flight == 0) {
          while (in_flight + batch.size() < depth && !retry.empty()) {
            batch.push_back(retry.front());
            retry.pop_front();
          }
          while (in_flight + batch.size() < depth && !queue_.empty()) {
            batch.push_back(queue_.front());
            queue_.pop_front();
          }
        }
      }
      if (!batch.empty()) {
        submit(batch);
        in_flight += batch.size();
        batch.clear();
      }
      if (in_flight > 0) in_flight -= reap(opt.overlap_events ? 1 : in_flight, &retry);
    }
  }

  void submit(const std::vector<AioBlock*>& batch) {
    for (AioBlock* b : batch) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
      if (sqe == nullptr) {  // the submission queue is full of prepared entries: flush it
        flush();
        sqe = io_uring_get_sqe(&ring_);
        if (sqe == nullptr) fatal("io_uring_get_sqe returned no entry after a flush", 0);
      }
      const unsigned n = static_cast<unsigned>(b->left_bytes);
      if (b->request->is_write)
        io_uring_prep_write(sqe, b->request->fd, b->buf, n, static_cast<uint64_t>(b->offset));
      else
        io_uring_prep_read(sqe, b->request->fd, b->buf, n, static_cast<uint64_t>(b->offset));
      io_uring_sqe_set_data(sqe, b);
      if (shared_->options.single_submit) flush();
    }
    flush();
  }

  // Submits every prepared entry. The kernel may take fewer than offered, or refuse for a
  // while (EAGAIN, EBUSY): what it did not take stays in the queue and is offered again.
  void flush() {
    int idle = 0;
    while (io_uring_sq_ready(&ring_) > 0) {
      int rc = io_uring_submit(&ring_);
      if (rc > 0) {
        idle = 0;
        continue;
      }
      if (rc == -EINTR) continue;
      if (rc == 0 || rc == -EAGAIN || rc == -EBUSY) {
        if (++idle > 100000) fatal("io_uring_submit makes no progress", rc == 0 ? EAGAIN : -rc);
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      // The prepared entries can neither be taken back nor failed: their buffers would be
      // written later. Nothing can continue safely.
      fatal("io_uring_submit failed", -rc);
    }
  }

  // Waits for at least min_done completions and handles every one available; returns how many
  // blocks left the ring (finished, failed, or moved to *retry).
  size_t reap(size_t min_done, std::deque<AioBlock*>* retry) {
    size_t done = 0;
    while (done < min_done) {
      io_uring_cqe* cqe = nullptr;
      int rc = io_uring_wait_cqe(&ring_, &cqe);
      if (rc == -EINTR || rc == -EAGAIN) continue;
      if (rc < 0) fatal("io_uring_wait_cqe failed", -rc);
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        complete(static_cast<AioBlock*>(io_uring_cqe_get_data(cqe)), cqe->res, retry);
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      done += seen;
    }
    return done;
  }

  void complete(AioBlock* b, int res, std::deque<AioBlock*>* retry) {
    if ((res == -EAGAIN || res == -EINTR) && ++b->retries <= kMaxRetries) {
      retry->push_back(b);
      return;
    }
    std::string error;
    if (res < 0) {
      error = shared_->block_error(*b, errno_text(-res));
    } else if (res == 0) {
      // No progress: at the end of the file for a read; a write that cannot go on.
      error = shared_->block_error(*b, b->request->is_write
                                           ? errno_text(ENOSPC) + " (the write made no progress)"
                                           : "unexpected end of file (the file is shorter)");
    } else {
      b->offset += res;
      b->buf += res;
      b->left_bytes -= res;
      if (b->left_bytes > 0) {  // short transfer: the rest goes again
        retry->push_back(b);
        return;
      }
    }
    shared_->finish_block(*b, error);
    delete b;
  }

  [[noreturn]] void fatal(const char* what, int err) {
    std::fprintf(stderr, "zero offload: rank %d, aio ring %d: %s: %s; aborting\n", shared_->rank,
                 index_, what, errno_text(err).c_str());
    std::abort();
  }

  AioShared* shared_;
  int index_;
  io_uring ring_{};
  std::thread thread_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AioBlock*> queue_;
  bool stop_ = false;
};

}  // namespace detail

AioEngine::AioEngine(const AioOptions& options, int rank)
    : shared_(std::make_unique<detail::AioShared>()) {
  const AioOptions& o = options;
  ZERO_CHECK(o.block_size_bytes > 0 && o.block_size_bytes % kIoAlign == 0 &&
                 o.block_size_bytes <= detail::kMaxBlockBytes,
             ConfigError, "aio.block_size: ", o.block_size_bytes,
             " must be a positive multiple of ", kIoAlign, " bytes, at most ",
             detail::kMaxBlockBytes, " (O_DIRECT transfers whole pages)");
  ZERO_CHECK(o.queue_depth >= 1 && o.queue_depth <= detail::kMaxQueueDepth, ConfigError,
             "aio.queue_depth: ", o.queue_depth, " must be in 1..", detail::kMaxQueueDepth);
  ZERO_CHECK(o.intra_op_parallelism >= 1 && o.intra_op_parallelism <= detail::kMaxParallelism,
             ConfigError, "aio.intra_op_parallelism: ", o.intra_op_parallelism, " must be in 1..",
             detail::kMaxParallelism);
  shared_->options = options;
  shared_->rank = rank;
  for (int i = 0; i < o.intra_op_parallelism; ++i)
    rings_.push_back(std::make_unique<detail::AioRing>(shared_.get(), i));
}

AioEngine::~AioEngine() {
  rings_.clear();  // each ring drains its queue and what is in flight
}

Ticket AioEngine::read(const SwapFile& file, int64_t offset, void* buf, int64_t bytes) {
  return submit(false, file, offset, buf, bytes);
}

Ticket AioEngine::write(const SwapFile& file, int64_t offset, const void* buf, int64_t bytes) {
  return submit(true, file, offset, const_cast<void*>(buf), bytes);
}

Ticket AioEngine::submit(bool is_write, const SwapFile& file, int64_t offset, void* buf,
                         int64_t bytes) {
  const char* op = is_write ? "write" : "read";
  ZERO_CHECK(file.fd() >= 0, UsageError, "rank ", shared_->rank, ": AioEngine::", op,
             " of a SwapFile that is not open");
  const auto address = reinterpret_cast<uintptr_t>(buf);
  ZERO_CHECK(buf != nullptr && bytes > 0 && offset >= 0 && address % kIoAlign == 0 &&
                 offset % kIoAlign == 0 && bytes % kIoAlign == 0,
             UsageError, "rank ", shared_->rank, ": AioEngine::", op, " of ", file.path(),
             ": buffer ", buf, ", offset ", offset, " and bytes ", bytes, " must be multiples of ",
             kIoAlign, " (O_DIRECT; use AlignedBuffer and align_up), bytes > 0");

  const int64_t block = shared_->options.block_size_bytes;
  const int64_t nblocks = (bytes + block - 1) / block;
  auto request = std::make_shared<detail::AioRequest>();
  request->is_write = is_write;
  request->fd = file.fd();
  request->path = file.path();
  request->offset = offset;
  request->bytes = bytes;
  // Block i goes to ring i % rings, so that all rings move through the request together.
  const size_t rings = rings_.size();
  std::vector<std::vector<detail::AioBlock*>> per_ring(rings);
  std::vector<std::unique_ptr<detail::AioBlock>> blocks;  // all made before the ticket exists
  for (int64_t i = 0; i < nblocks; ++i) {
    auto b = std::make_unique<detail::AioBlock>();
    b->request = request;
    b->offset = offset + i * block;
    b->buf = static_cast<char*>(buf) + i * block;
    b->left_bytes = b->block_bytes = std::min(block, bytes - i * block);
    per_ring[static_cast<size_t>(i) % rings].push_back(b.get());
    blocks.push_back(std::move(b));
  }
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    request->ticket = shared_->next_ticket++;
    shared_->tickets[request->ticket].blocks_left = nblocks;
    ++shared_->unfinished;
  }
  for (auto& b : blocks) static_cast<void>(b.release());  // the rings own them now
  for (size_t r = 0; r < rings; ++r)
    if (!per_ring[r].empty()) rings_[r]->enqueue(per_ring[r]);
  return request->ticket;
}

void AioEngine::wait(Ticket ticket) {
  std::unique_lock<std::mutex> lock(shared_->mu);
  ZERO_CHECK(ticket >= 1 && ticket < shared_->next_ticket, UsageError, "rank ", shared_->rank,
             ": AioEngine::wait: ticket ", ticket, " was never issued");
  auto it = shared_->tickets.find(ticket);
  shared_->done_cv.wait(lock, [&] {
    it = shared_->tickets.find(ticket);
    return it == shared_->tickets.end() || it->second.blocks_left == 0;
  });
  if (it == shared_->tickets.end()) return;
  std::string error = it->second.error;
  if (it->second.more_failed > 0)
    error += ::zero::detail::str(" (and ", it->second.more_failed,
                                 " more failed blocks of this request)");
  shared_->tickets.erase(it);
  throw IoError(error);
}

void AioEngine::wait_all() {
  std::unique_lock<std::mutex> lock(shared_->mu);
  shared_->done_cv.wait(lock, [&] { return shared_->unfinished == 0; });
  if (shared_->tickets.empty()) return;
  std::map<Ticket, std::string> errors;  // ordered: the first failed ticket is reported
  for (const auto& [ticket, state] : shared_->tickets) errors.emplace(ticket, state.error);
  shared_->tickets.clear();
  std::string error = errors.begin()->second;
  if (errors.size() > 1)
    error += ::zero::detail::str(" (and ", errors.size() - 1, " more failed requests)");
  throw IoError(error);
}

bool AioEngine::is_completed(Ticket ticket) const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  auto it = shared_->tickets.find(ticket);
  return ticket >= 1 && ticket < shared_->next_ticket &&
         (it == shared_->tickets.end() || it->second.blocks_left == 0);
}

int64_t AioEngine::bytes_read() const {
  return shared_->bytes_read.load();
}
int64_t AioEngine::bytes_written() const {
  return shared_->bytes_written.load();
}
const AioOptions& AioEngine::options() const {
  return shared_->options;
}
int AioEngine::rank() const {
  return shared_->rank;
}

std::string io_uring_unavailable_reason() {
  io_uring ring{};
  int rc = io_uring_queue_init(2, &ring, 0);
  if (rc < 0)
    return "io_uring_queue_init failed: " + detail::errno_text(-rc) +
           detail::io_uring_disabled_hint(-rc);
  std::string reason;
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  if (probe == nullptr) {
    reason = "io_uring has no opcode probe (kernel older than 5.6)";
  } else {
    if (!io_uring_opcode_supported(probe, IORING_OP_READ) ||
        !io_uring_opcode_supported(probe, IORING_OP_WRITE))
      reason = "io_uring lacks IORING_OP_READ/WRITE (kernel older than 5.6)";
    io_uring_free_probe(probe);
  }
  if (reason.empty()) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    io_uring_prep_nop(sqe);
    rc = io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (rc < 0) {
      reason = "io_uring_submit of a NOP failed: " + detail::errno_text(-rc);
    } else if ((rc = io_uring_wait_cqe(&ring, &cqe)) < 0) {
      reason = "waiting for a NOP failed: " + detail::errno_text(-rc);
    } else {
      if (cqe->res < 0) reason = "a NOP completed with " + detail::errno_text(-cqe->res);
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  io_uring_queue_exit(&ring);
  return reason;
}

}  // namespace zero::offload
