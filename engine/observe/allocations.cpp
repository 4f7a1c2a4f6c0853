// A counting allocator in front of c10's CPU allocator: the DataPtr it returns is the wrapped
// allocator's own (same deleter and context), so frees, raw_allocate and storage resizes behave
// as before; only allocate() is seen.
#include <zero/engine/allocations.h>
#include <zero/engine/host_pool.h>

#include <c10/core/CPUAllocator.h>
#include <c10/util/Backtrace.h>

#include <atomic>
#include <cstdlib>
#include <iostream>
#include <mutex>

namespace zero {
namespace {

std::atomic<int64_t> g_count{0};
std::atomic<int64_t> g_bytes{0};

class CountingCpuAllocator final : public c10::Allocator {
 public:
  explicit CountingCpuAllocator(c10::Allocator* base) : base_(base) {
    if (const char* v = std::getenv("ZERO_ALLOC_TRACE_BYTES")) trace_bytes_ = std::atoll(v);
  }
  c10::DataPtr allocate(size_t n) const override {
    g_count.fetch_add(1, std::memory_order_relaxed);
    g_bytes.fetch_add(static_cast<int64_t>(n), std::memory_order_relaxed);
    if (trace_bytes_ > 0 && static_cast<int64_t>(n) >= trace_bytes_)
      std::cerr << "zero: CPU allocation of " << n << " bytes\n"
                << c10::get_backtrace(/*frames_to_skip=*/1, /*maximum_number_of_frames=*/24)
                << std::flush;
    return base_->allocate(n);
  }
  c10::DeleterFnPtr raw_deleter() const override { return base_->raw_deleter(); }

 private:
  c10::Allocator* base_;
  int64_t trace_bytes_ = 0;
};

}  // namespace

void count_cpu_allocations() {
  static std::once_flag once;
  std::call_once(once, [] {
    // The pool an engine installs goes behind the counter, whichever is asked for first, so that
    // large allocations are counted too (the later of two allocators of one priority replaces
    // the earlier in c10).
    use_host_pool();
    // Never freed: tensors allocated through it may outlive every static destructor.
    static auto* counter = new CountingCpuAllocator(c10::GetCPUAllocator());
    // Above the default's priority 0, so that the counter stays in front.
    c10::SetCPUAllocator(counter, /*priority=*/1);
  });
}

CpuAllocations cpu_allocations() {
  return {g_count.load(std::memory_order_relaxed), g_bytes.load(std::memory_order_relaxed)};
}

}  // namespace zero
