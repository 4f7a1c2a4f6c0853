// A Work that some thread of ours completes: finish() marks it done (with the failure, if any)
// and wakes every wait(). The Gloo backend's collectives and the hierarchical all-reduces are
// such work.
#pragma once

#include <zero/comm/communicator.h>

#include <condition_variable>
#include <mutex>

namespace zero {

class CompletionWork final : public Work {
 public:
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return done_; });
    if (error_) std::rethrow_exception(error_);
  }
  bool is_completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  std::exception_ptr error() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return error_;
  }
  void finish(std::exception_ptr error) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::move(error);
      done_ = true;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace zero
