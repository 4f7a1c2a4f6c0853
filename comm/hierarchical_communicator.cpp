// HierarchicalCommunicator: the queue of hierarchical all-reduces and its thread.
#include <zero/comm/hierarchical_communicator.h>

#include "completion_work.h"

#include <zero/error.h>

#include <c10/core/ScalarType.h>

namespace zero {

struct HierarchicalCommunicator::Job {
  std::function<void()> body;  // holds the tensors until it ran
  std::shared_ptr<CompletionWork> work = std::make_shared<CompletionWork>();
};

HierarchicalCommunicator::HierarchicalCommunicator(std::shared_ptr<Communicator> flat,
                                                   HostGroups groups, int64_t min_bytes,
                                                   int64_t quantized_block,
                                                   int64_t gather_min_bytes)
    : flat_(std::move(flat)),
      groups_(std::move(groups)),
      min_bytes_(min_bytes),
      gather_min_bytes_(gather_min_bytes >= 0 ? gather_min_bytes : min_bytes),
      quantized_block_(quantized_block) {
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

WorkHandle HierarchicalCommunicator::enqueue(std::function<void()> body) {
  auto job = std::make_shared<Job>();
  job->body = std::move(body);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  ready_.notify_one();
  return job->work;
}

WorkHandle HierarchicalCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  if (static_cast<int64_t>(tensor.nbytes()) < min_bytes_) return flat_->all_reduce(tensor, op);
  return enqueue([this, tensor, op]() mutable { hierarchical_all_reduce(groups_, tensor, op); });
}

WorkHandle HierarchicalCommunicator::reduce_scatter_v(const at::Tensor& input, at::Tensor& output,
                                                      const std::vector<int64_t>& counts,
                                                      ReduceOp op, InputUse use) {
  if (quantized_block_ > 0 && (op == ReduceOp::kSum || op == ReduceOp::kAvg) &&
      c10::isFloatingType(input.scalar_type()))
    return quantized_reduce_scatter_v(input, output, counts, op, at::Tensor());
  if (static_cast<int64_t>(input.nbytes()) < min_bytes_)
    return flat_->reduce_scatter_v(input, output, counts, op, use);
  return enqueue([this, input, output, counts, op]() mutable {
    hierarchical_reduce_scatter_v(groups_, input, output, counts, op);
  });
}

WorkHandle HierarchicalCommunicator::quantized_reduce_scatter_v(const at::Tensor& input,
                                                                at::Tensor& output,
                                                                const std::vector<int64_t>& counts,
                                                                ReduceOp op,
                                                                const at::Tensor& exact) {
  ZERO_CHECK(quantized_block_ > 0, UsageError,
             "quantized_reduce_scatter_v: this communicator does not quantize (block 0)");
  return enqueue([this, input, output, counts, op, exact]() mutable {
    quantized_hierarchical_reduce_scatter_v(groups_, input, output, counts, op, quantized_block_,
                                            exact);
  });
}

WorkHandle HierarchicalCommunicator::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                                    ReduceOp op, InputUse use) {
  return reduce_scatter_v(input, output, std::vector<int64_t>(world_size(), output.numel()), op,
                          use);
}

WorkHandle HierarchicalCommunicator::all_gather_v(const at::Tensor& input, at::Tensor& output,
                                                  const std::vector<int64_t>& counts) {
  if (static_cast<int64_t>(output.nbytes()) < gather_min_bytes_)
    return flat_->all_gather_v(input, output, counts);
  return enqueue([this, input, output, counts]() mutable {
    hierarchical_all_gather_v(groups_, input, output, counts);
  });
}

WorkHandle HierarchicalCommunicator::all_gather(const at::Tensor& input, at::Tensor& output) {
  return all_gather_v(input, output, std::vector<int64_t>(world_size(), input.numel()));
}

std::vector<Communicator*> HierarchicalCommunicator::members() const {
  std::vector<Communicator*> out{flat_.get()};
  if (groups_.node) out.push_back(groups_.node.get());
  if (groups_.cross_node) out.push_back(groups_.cross_node.get());
  return out;
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
      job->body();
    } catch (...) {
      failure = std::current_exception();
    }
    job->body = nullptr;  // the tensors go before the waiter wakes
    job->work->finish(failure);
  }
}

}  // namespace zero
