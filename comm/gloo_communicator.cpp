// The Gloo backend: rendezvous of a group's full mesh through the KvStore, collectives on a
// worker thread (Gloo's new-style algorithms + our ring reduce-scatter), timeouts and errors.
#include "gloo_communicator.h"

#include "completion_work.h"
#include "p2p.h"
#include "reduce_kernels.h"

#include <zero/comm/comms_log.h>
#include <zero/error.h>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstring>
#include <numeric>
#include <set>

namespace zero::detail {
namespace {

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = "[";
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s + "]";
}

// gloo::rendezvous::Store over our KvStore, under the group's key prefix. Gloo's full-mesh
// rendezvous publishes one key per rank ("0", "1", ...), so a timeout can name who is missing.
class GlooStoreAdapter : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(KvStore& store, std::string prefix, int size, std::chrono::milliseconds timeout)
      : store_(store), prefix_(std::move(prefix)), size_(size), timeout_(timeout) {}

  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(prefix_ + key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    std::vector<uint8_t> v = store_.get(prefix_ + key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    std::vector<std::string> full;
    for (const std::string& k : keys) full.push_back(prefix_ + k);
    try {
      store_.wait(full, timeout);
    } catch (const TimeoutError&) {
      std::vector<int> missing;
      for (int r = 0; r < size_; ++r)
        if (!store_.check({prefix_ + std::to_string(r)})) missing.push_back(r);
      throw TimeoutError(str("rendezvous of group '", prefix_, "' (", size_,
                             " ranks) timed out after ", timeout.count(),
                             " ms; ranks that had not arrived: ", rank_list(missing)));
    }
  }

 private:
  KvStore& store_;
  std::string prefix_;
  int size_;
  std::chrono::milliseconds timeout_;
};

ShmGroup::Clock::time_point deadline_after(std::chrono::milliseconds timeout) {
  return ShmGroup::Clock::now() + timeout;
}

bool is_timeout_message(const std::string& what) {
  std::string lower(what);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return lower.find("timed out") != std::string::npos || lower.find("timeout") != std::string::npos;
}

void check_tensor(const at::Tensor& t, const char* op, const char* what) {
  ZERO_CHECK(t.defined(), UsageError, op, ": ", what, " is undefined");
  ZERO_CHECK(t.device().is_cpu(), UsageError, op, ": ", what, " is on ", t.device().str(),
             "; the Gloo backend serves CPU tensors");
  ZERO_CHECK(t.is_contiguous(), UsageError, op, ": ", what, " must be contiguous");
  check_supported_dtype(t.scalar_type(), op);
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  ZERO_CHECK(a.scalar_type() == b.scalar_type(), UsageError, op, ": input is ",
             c10::toString(a.scalar_type()), " but output is ", c10::toString(b.scalar_type()));
}

// Gloo only looks at sizeof(T): dispatch on the element width.
template <typename Fn>
void with_width(size_t bytes, Fn&& fn) {
  switch (bytes) {
    case 1:
      return fn(uint8_t{});
    case 2:
      return fn(uint16_t{});
    case 4:
      return fn(uint32_t{});
    case 8:
      return fn(uint64_t{});
  }
  ZERO_ASSERT(false, "element width ", bytes);
}

}  // namespace

struct GlooCommunicator::Task {
  uint64_t seq = 0;  // 0: a point-to-point batch
  std::string p2p;   // its ops, described
  const char* op = "";
  int64_t bytes = 0;
  std::vector<at::Tensor> tensors;  // kept alive until the collective finished
  Body body;
  std::shared_ptr<CommsLog> log;  // comms_logger: where the latency goes, when set
  const char* caller = "";
  std::shared_ptr<CompletionWork> work;
};

using GlooWork = CompletionWork;

GlooCommunicator::GlooCommunicator(GlooGroupSpec spec) : spec_(std::move(spec)) {
  ZERO_ASSERT(spec_.store && spec_.device, "GlooCommunicator needs a store and a device");
  ZERO_ASSERT(spec_.rank >= 0 && spec_.rank < spec_.size, "rank ", spec_.rank, " size ",
              spec_.size);
  auto context = std::make_shared<gloo::rendezvous::Context>(spec_.rank, spec_.size);
  context->setTimeout(spec_.timeout);
  GlooStoreAdapter adapter(*spec_.store, spec_.name + "/rdzv/", spec_.size, spec_.timeout);
  try {
    context->connectFullMesh(adapter, spec_.device);
  } catch (const TimeoutError&) {
    throw;
  } catch (const std::exception& e) {
    const std::string msg = str("rendezvous of group '", spec_.name, "' failed on rank ",
                                spec_.rank, " of ", spec_.size, ": ", e.what());
    if (is_timeout_message(e.what())) throw TimeoutError(msg);
    throw CommError(msg);
  }
  context_ = std::move(context);
  setup_shared_memory();
  worker_ = std::thread([this] { worker_loop(); });
  reporter_ = std::thread([this] { reporter_loop(); });
}

GlooCommunicator::~GlooCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  {
    std::lock_guard<std::mutex> lock(report_mutex_);
    report_stop_ = true;
  }
  report_cv_.notify_all();
  if (reporter_.joinable()) reporter_.join();
}

std::string GlooCommunicator::arrival_key(int rank) const {
  return spec_.name + "/arrived/" + std::to_string(rank);
}

WorkHandle GlooCommunicator::issue(const char* op, int64_t bytes, std::vector<at::Tensor> tensors,
                                   Body body, std::string p2p) {
  auto task = std::make_unique<Task>();
  task->op = op;
  task->p2p = std::move(p2p);
  task->bytes = bytes;
  task->tensors = std::move(tensors);
  task->body = std::move(body);
  if (auto log = comms_log(); log && log->wants(op)) {
    task->log = std::move(log);
    task->caller = CommsLog::caller();
  }
  auto work = std::make_shared<GlooWork>();
  task->work = work;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ZERO_CHECK(!stop_, UsageError, op, ": communicator is shutting down");
    if (task->p2p.empty()) task->seq = next_seq_++;
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
  return work;
}

void GlooCommunicator::worker_loop() {
  for (;;) {
    std::unique_ptr<Task> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    run(*task);
  }
}

void GlooCommunicator::run(Task& task) {
  const std::string where =
      str(task.op, " (", task.p2p.empty() ? str("seq ", task.seq) : task.p2p, ", ", task.bytes,
          " bytes, group '", spec_.name, "', rank ", spec_.rank, " of ", spec_.size, ")");
  if (!broken_.empty()) {
    task.work->finish(std::make_exception_ptr(CommError(
        str(where, " not run: the communicator is unusable after an earlier failure: ", broken_))));
    return;
  }
  if (task.p2p.empty()) {  // peers of a point-to-point batch are not the whole group
    arrived_seq_.store(task.seq);
    if (reporter_idle_.load()) {  // wake it only from its idle wait; the lock avoids a lost wakeup
      { std::lock_guard<std::mutex> lock(report_mutex_); }
      report_cv_.notify_one();
    }
  }
  std::exception_ptr error;
  const auto start = std::chrono::steady_clock::now();
  try {
    task.body(static_cast<uint32_t>(task.seq));
    if (task.log)
      task.log->record(
          task.op, task.bytes, spec_.size,
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count(),
          task.caller);
  } catch (const Error&) {
    error = std::current_exception();
  } catch (const ShmWaitError& e) {
    if (e.exited.empty())
      error = std::make_exception_ptr(
          TimeoutError(str(where, " timed out after ", spec_.timeout.count(),
                           " ms; ranks that had not arrived: ", rank_list(e.missing))));
    else
      error = std::make_exception_ptr(CommError(str(
          where, " failed: the process of rank ", e.exited.front(),
          " exited while this rank waited for it in shared memory; ranks whose process exited: ",
          rank_list(e.exited))));
  } catch (const std::exception& e) {
    if (is_timeout_message(e.what()) && task.p2p.empty()) {
      error = std::make_exception_ptr(TimeoutError(
          str(where, " timed out after ", spec_.timeout.count(),
              " ms; ranks that had not arrived: ", missing_ranks(task.seq), "; gloo: ", e.what())));
    } else {
      error = std::make_exception_ptr(CommError(str(where, " failed: gloo: ", e.what())));
    }
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const std::exception& e) {
      broken_ = e.what();
    }
    for (at::Tensor& t : task.tensors) graveyard_.push_back(t);
  }
  task.tensors.clear();
  task.work->finish(error);
}

// Publishes this rank's latest arrival lazily: at most once per kReportDelay, so fast
// collectives cost no store traffic, while any rank that has sat in (or after) a collective for
// longer than that is visible to a peer whose timeout (>= 8x the delay) expires.
void GlooCommunicator::reporter_loop() {
  const auto delay =
      std::min<std::chrono::milliseconds>(std::chrono::milliseconds(250), spec_.timeout / 8);
  uint64_t published = 0;
  const std::string key = arrival_key(spec_.rank);
  std::unique_lock<std::mutex> lock(report_mutex_);
  for (;;) {
    reporter_idle_.store(true);
    report_cv_.wait(lock, [&] { return report_stop_ || arrived_seq_.load() != published; });
    reporter_idle_.store(false);
    if (report_stop_) return;
    if (report_cv_.wait_for(lock, delay, [&] { return report_stop_; })) return;
    published = arrived_seq_.load();
    const std::string value = std::to_string(published);
    lock.unlock();
    try {
      spec_.store->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    } catch (const std::exception&) {
      return;  // the store is gone (rank 0 exited): nothing left to report to
    }
    lock.lock();
  }
}

std::string GlooCommunicator::missing_ranks(uint64_t seq) {
  try {
    std::vector<int> missing;
    for (int r = 0; r < spec_.size; ++r) {
      uint64_t progress = 0;
      if (spec_.store->check({arrival_key(r)})) {
        std::vector<uint8_t> v = spec_.store->get(arrival_key(r));
        progress = std::stoull(std::string(v.begin(), v.end()));
      }
      if (r != spec_.rank && progress < seq) missing.push_back(r);
    }
    if (missing.empty())
      return "none (every rank reached this collective; one stalled or failed inside it)";
    return rank_list(missing);
  } catch (const std::exception& e) {
    return str("unknown (store unreachable: ", e.what(), ")");
  }
}

WorkHandle GlooCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce", "tensor");
  const at::ScalarType dtype = tensor.scalar_type();
  const size_t es = dtype_bytes(dtype), n = tensor.numel();
  ReduceFn fn = reduce_fn(dtype, op);
  void* ptr = tensor.data_ptr();
  return issue("all_reduce", n * es, {tensor}, [=](uint32_t tag) {
    if (n == 0 || spec_.size == 1) return;
    if (shm_) return shm_->all_reduce(ptr, n, dtype, op, deadline_after(spec_.timeout));
    gloo::AllreduceOptions opts(context_);
    with_width(es, [&](auto t) { opts.setOutput(static_cast<decltype(t)*>(ptr), n); });
    opts.setReduceFunction(fn);
    opts.setTag(tag);
    opts.setTimeout(spec_.timeout);
    gloo::allreduce(opts);
    if (op == ReduceOp::kAvg) divide_inplace(ptr, n, dtype, spec_.size);
  });
}

WorkHandle GlooCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                            ReduceOp op, InputUse use) {
  check_tensor(output, "reduce_scatter", "output");
  ZERO_CHECK(input.numel() == output.numel() * spec_.size, UsageError, "reduce_scatter: input has ",
             input.numel(), " elements; expected world_size (", spec_.size, ") x output (",
             output.numel(), ")");
  return reduce_scatter_v(input, output, std::vector<int64_t>(spec_.size, output.numel()), op, use);
}

WorkHandle GlooCommunicator::reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                                              const std::vector<int64_t>& counts, ReduceOp op,
                                              InputUse use) {
  check_tensor(input, "reduce_scatter", "input");
  check_tensor(output, "reduce_scatter", "output");
  check_same_dtype(input, output, "reduce_scatter");
  ZERO_CHECK(static_cast<int>(counts.size()) == spec_.size, UsageError,
             "reduce_scatter_v: ", counts.size(), " counts for ", spec_.size, " ranks");
  ZERO_CHECK(std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 0; }),
             UsageError, "reduce_scatter_v: negative count");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  ZERO_CHECK(input.numel() == total, UsageError, "reduce_scatter_v: input has ", input.numel(),
             " elements but the counts sum to ", total);
  ZERO_CHECK(output.numel() == counts[spec_.rank], UsageError, "reduce_scatter_v: output has ",
             output.numel(), " elements; rank ", spec_.rank, "'s count is ", counts[spec_.rank]);
  const at::ScalarType dtype = input.scalar_type();
  const size_t es = dtype_bytes(dtype);
  ReduceFn fn = reduce_fn(dtype, op);
  void* in = input.data_ptr();
  void* out = output.data_ptr();
  return issue("reduce_scatter", total * es, {input, output}, [=](uint32_t tag) {
    if (shm_)
      return shm_->reduce_scatter_v(in, out, counts, dtype, op, deadline_after(spec_.timeout));
    ring_reduce_scatter(context_, in, out, counts, es, fn, tag, spec_.timeout, use, scratch_);
    if (op == ReduceOp::kAvg) divide_inplace(out, counts[spec_.rank], dtype, spec_.size);
  });
}

WorkHandle GlooCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  check_tensor(input, "all_gather", "input");
  ZERO_CHECK(output.numel() == input.numel() * spec_.size, UsageError, "all_gather: output has ",
             output.numel(), " elements; expected world_size (", spec_.size, ") x input (",
             input.numel(), ")");
  return all_gather_v(input, output, std::vector<int64_t>(spec_.size, input.numel()));
}

WorkHandle GlooCommunicator::all_gather_v(const at::Tensor& input, at::Tensor& output,
                                          const std::vector<int64_t>& counts) {
  check_tensor(input, "all_gather", "input");
  check_tensor(output, "all_gather", "output");
  check_same_dtype(input, output, "all_gather");
  ZERO_CHECK(static_cast<int>(counts.size()) == spec_.size, UsageError,
             "all_gather_v: ", counts.size(), " counts for ", spec_.size, " ranks");
  ZERO_CHECK(std::all_of(counts.begin(), counts.end(), [](int64_t c) { return c >= 0; }),
             UsageError, "all_gather_v: negative count");
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  ZERO_CHECK(output.numel() == total, UsageError, "all_gather_v: output has ", output.numel(),
             " elements but the counts sum to ", total);
  ZERO_CHECK(input.numel() == counts[spec_.rank], UsageError, "all_gather_v: input has ",
             input.numel(), " elements; rank ", spec_.rank, "'s count is ", counts[spec_.rank]);
  const size_t es = dtype_bytes(input.scalar_type());
  void* in = input.data_ptr();
  void* out = output.data_ptr();
  const bool equal =
      std::all_of(counts.begin(), counts.end(), [&](int64_t c) { return c == counts[0]; });
  // The input already where the output puts it (a stage's own shard inside its flat buffer):
  // Gloo gathers in place when given no input, instead of copying the input onto itself.
  const int64_t my_offset =
      std::accumulate(counts.begin(), counts.begin() + spec_.rank, int64_t{0});
  const bool in_place = static_cast<char*>(out) + my_offset * es == in;
  return issue("all_gather", total * es, {input, output}, [=](uint32_t tag) {
    if (total == 0) return;
    if (spec_.size == 1) {
      if (out != in) std::memcpy(out, in, total * es);
      return;
    }
    if (shm_) return shm_->all_gather_v(in, out, counts, es, deadline_after(spec_.timeout));
    with_width(es, [&](auto t) {
      using T = decltype(t);
      if (equal) {
        gloo::AllgatherOptions opts(context_);
        if (!in_place) opts.setInput(static_cast<T*>(in), counts[0]);
        opts.setOutput(static_cast<T*>(out), total);
        opts.setTag(tag);
        opts.setTimeout(spec_.timeout);
        gloo::allgather(opts);
      } else {
        gloo::AllgathervOptions opts(context_);
        if (!in_place) opts.setInput(static_cast<T*>(in), counts[spec_.rank]);
        opts.setOutput(static_cast<T*>(out), std::vector<size_t>(counts.begin(), counts.end()));
        opts.setTag(tag);
        opts.setTimeout(spec_.timeout);
        gloo::allgatherv(opts);
      }
    });
  });
}

WorkHandle GlooCommunicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor(tensor, "broadcast", "tensor");
  ZERO_CHECK(root >= 0 && root < spec_.size, UsageError, "broadcast: root ", root,
             " is not a rank of this group of ", spec_.size);
  const size_t es = dtype_bytes(tensor.scalar_type()), n = tensor.numel();
  void* ptr = tensor.data_ptr();
  return issue("broadcast", n * es, {tensor}, [=](uint32_t tag) {
    if (n == 0 || spec_.size == 1) return;
    if (shm_) return shm_->broadcast(ptr, n * es, root, deadline_after(spec_.timeout));
    gloo::BroadcastOptions opts(context_);
    with_width(es, [&](auto t) { opts.setOutput(static_cast<decltype(t)*>(ptr), n); });
    opts.setRoot(root);
    opts.setTag(tag);
    opts.setTimeout(spec_.timeout);
    gloo::broadcast(opts);
  });
}

WorkHandle GlooCommunicator::barrier() {
  return issue("barrier", 0, {}, [=](uint32_t tag) {
    if (spec_.size == 1) return;
    if (shm_) return shm_->barrier(deadline_after(spec_.timeout));
    gloo::BarrierOptions opts(context_);
    opts.setTag(tag);
    opts.setTimeout(spec_.timeout);
    gloo::barrier(opts);
  });
}

WorkHandle GlooCommunicator::batch_p2p(std::vector<P2POp> ops) {
  check_p2p_peers(ops, spec_.rank, spec_.size);
  std::vector<at::Tensor> tensors;
  std::vector<P2PTransfer> transfers;
  for (const P2POp& o : ops) {
    check_tensor(o.tensor, "batch_p2p",
                 o.kind == P2POp::Kind::kSend ? "a sent tensor" : "a receive buffer");
    tensors.push_back(o.tensor);
    transfers.push_back({o.kind, o.tensor.data_ptr(), o.tensor.nbytes(), o.peer, 0});
  }
  std::string described = describe_p2p(ops);
  return issue(
      "batch_p2p", p2p_bytes(ops), std::move(tensors),
      [this, transfers, described](uint32_t) mutable {
        if (sent_to_.empty()) sent_to_.assign(spec_.size, 0), received_from_.assign(spec_.size, 0);
        for (P2PTransfer& t : transfers)
          t.message = (t.kind == P2POp::Kind::kSend ? sent_to_ : received_from_)[t.peer]++;
        const std::string where =
            str("batch_p2p (group '", spec_.name, "', rank ", spec_.rank, " of ", spec_.size, ")");
        if (shm_) return shm_->p2p(transfers, deadline_after(spec_.timeout), spec_.timeout, where);
        gloo_p2p(context_, transfers, spec_.timeout, where);
      },
      std::move(described));
}

std::shared_ptr<Communicator> GlooCommunicator::new_group(const std::vector<int>& ranks) {
  ZERO_CHECK(!ranks.empty(), UsageError, "new_group: empty rank list");
  std::set<int> unique(ranks.begin(), ranks.end());
  ZERO_CHECK(unique.size() == ranks.size(), UsageError, "new_group: duplicate ranks in ",
             rank_list(ranks));
  ZERO_CHECK(*unique.begin() >= 0 && *unique.rbegin() < spec_.size, UsageError, "new_group: ranks ",
             rank_list(ranks), " outside [0, ", spec_.size, ")");
  const int index = groups_created_++;
  auto it = std::find(ranks.begin(), ranks.end(), spec_.rank);
  if (it == ranks.end()) return nullptr;
  GlooGroupSpec spec = spec_;
  spec.name = spec_.name + "/g" + std::to_string(index);
  spec.rank = static_cast<int>(it - ranks.begin());
  spec.size = static_cast<int>(ranks.size());
  auto group = std::make_shared<GlooCommunicator>(std::move(spec));
  // A rank's rendezvous ends once its own pairs connect, maybe before a peer's handshake on one of
  // them has: a rank that then dropped the group (an error right after, a short-lived grid)
  // failed the peer's rendezvous ("connection closed by peer"). Nobody returns before everyone
  // is connected.
  group->barrier()->wait();
  group->set_comms_log(comms_log());
  return group;
}

}  // namespace zero::detail
