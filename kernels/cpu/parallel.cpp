// The CPU kernels' thread pool: workers sleep on a condition variable and join the current
// job, taking blocks from its counter; the caller works too and waits for the rest.
#include "parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace zero::kernels::detail {
namespace {

class ThreadPool {
 public:
  explicit ThreadPool(int workers) {
    for (int w = 0; w < workers; ++w) threads_.emplace_back([this, w] { work(w + 1); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_work_.notify_all();
    for (std::thread& t : threads_) t.join();
  }
  int workers() const { return static_cast<int>(threads_.size()); }

  // Runs job(c) for c in [0, chunks); chunks <= workers() + 1.
  void run(int chunks, const std::function<void(int)>& job) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &job;
      job_chunks_ = chunks;
      pending_ = chunks - 1;
      ++generation_;
    }
    cv_work_.notify_all();
    job(0);
    std::unique_lock<std::mutex> lock(mu_);
    cv_done_.wait(lock, [this] { return pending_ == 0; });
    job_ = nullptr;
  }

 private:
  void work(int chunk) {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_work_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      if (chunk >= job_chunks_) continue;
      const std::function<void(int)>* job = job_;
      lock.unlock();
      (*job)(chunk);
      lock.lock();
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  std::vector<std::thread> threads_;
  const std::function<void(int)>* job_ = nullptr;
  int job_chunks_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

std::mutex g_pool_mu;  // held for a whole parallel_for: one job at a time
std::unique_ptr<ThreadPool> g_pool;

}  // namespace

int parallel_chunk_count(int64_t numel, int threads) {
  if (numel <= 0 || threads <= 1) return 1;
  const int64_t by_size = (numel + kMinChunkNumel - 1) / kMinChunkNumel;
  const int64_t most = static_cast<int64_t>(threads) * kBlocksPerThread;
  return static_cast<int>(std::max<int64_t>(1, std::min(most, by_size)));
}

int parallel_for(int64_t numel, int threads, const std::function<void(int, int64_t, int64_t)>& fn) {
  if (numel <= 0) return 1;
  const int blocks = parallel_chunk_count(numel, threads);
  std::unique_lock<std::mutex> lock(g_pool_mu, std::defer_lock);
  if (blocks == 1 || !lock.try_lock()) {
    fn(0, 0, numel);
    return 1;
  }
  const int participants = std::min(threads, blocks);
  if (!g_pool || g_pool->workers() < participants - 1) {
    g_pool.reset();
    g_pool = std::make_unique<ThreadPool>(participants - 1);
  }
  // Equal blocks rounded up to 64 elements; the last one takes the remainder.
  const int64_t per_block = ((numel + blocks - 1) / blocks + 63) / 64 * 64;
  std::atomic<int> next_block{0};
  const std::function<void(int)> job = [&](int) {
    for (int b = next_block.fetch_add(1); b < blocks; b = next_block.fetch_add(1)) {
      const int64_t begin = std::min<int64_t>(numel, b * per_block);
      const int64_t end = std::min<int64_t>(numel, begin + per_block);
      if (begin < end) fn(b, begin, end);
    }
  };
  g_pool->run(participants, job);
  return blocks;
}

}  // namespace zero::kernels::detail
