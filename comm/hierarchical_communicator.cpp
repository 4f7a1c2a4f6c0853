// HierarchicalCommunicator: the queue of hierarchical all-reduces and its thread.
#include <zero/comm/hierarchical_communicator.h>

#include "completion_work.h"

namespace zero {

struct HierarchicalCommunicator::Job {
  at::Tensor tensor;
  ReduceOp op = ReduceOp::kSum;
  std::shared_ptr<CompletionWork> work = std::make_shared<CompletionWork>();
};

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                   HostGroups groups, int64_t min_bytes)
    : flat_(std::move(flat)), groups_(std::move(groups)), min_bytes_(min_bytes) {
  worker_ = std::thread([this] { run(); });
}

HierarchicalCommunicator::~HierarchicalCommunicator() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  worker_.join();
}

WorkHandle HierarchicalCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (static_cast<int64_t>(tensor.nbytes()) < min_bytes_) return flat_->all_reduce(tensor, op);
  auto job = std::make_shared<Job>();
  job->tensor = tensor;
  job->op = op;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
    ++count_;
  }
  ready_.notify_one();
  return job->work;
}

std::vector<Communicator*> HierarchicalCommunicator::members() const {
  std::vector<Communicator*> out{flat_.get()};
  if (groups_.node) out.push_back(groups_.node.get());
  if (groups_.cross_node) out.push_back(groups_.cross_node.get());
  return out;
}

int64_t HierarchicalCommunicator::hierarchical_count() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return count_;
}

void HierarchicalCommunicator::run() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      ready_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = queue_.front();
      queue_.pop_front();
    }
    std::exception_ptr failure;
    try {
      hierarchical_all_reduce(groups_, job->tensor, job->op);
    } catch (...) {
      failure = std::current_exception();
    }
    job->work->finish(failure);
  }
}

}  // namespace zero
