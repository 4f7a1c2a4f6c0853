// The host pool (zero/engine/host_pool.h) in front of c10's CPU allocator: large tensors come from
// it and small ones do not; a repeated step lands on the same addresses and does not grow; freed
// neighbours coalesce; what lies above the last step's highest address goes back to the OS at a
// step boundary (RSS from /proc falls); raw allocations (LibTorch's raw_allocate) of either size
// are freed by whoever served them; threads allocating at once keep their bytes; the
// profiler's memory hook sees pool tensors as it saw them before, and may allocate itself.
#include <catch2/catch.hpp>

#include <zero/engine/host_pool.h>

#include <ATen/ATen.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>

#include <atomic>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

namespace {

constexpr int64_t kMiB = 1 << 20;

bool pool_on() {
  zero::use_host_pool();
  return zero::host_pool_stats().active;
}

at::Tensor bytes_tensor(int64_t bytes) {
  return at::empty({bytes}, at::kByte);
}

int64_t rss_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * 4096;
}

// One "step": activations kept until the end, transients freed on the way.
std::vector<void*> run_step(const std::vector<int64_t>& sizes) {
  std::vector<void*> where;
  std::vector<at::Tensor> kept;
  for (size_t i = 0; i < sizes.size(); ++i) {
    at::Tensor t = bytes_tensor(sizes[i]);
    where.push_back(t.data_ptr());
    at::Tensor transient = bytes_tensor(sizes[(i + 1) % sizes.size()] / 2 + 4096);
    where.push_back(transient.data_ptr());
    if (i % 2 == 0) kept.push_back(t);
  }
  return where;
}

struct ProfilerHook : c10::MemoryReportingInfoBase {
  std::atomic<int64_t> live{0};
  void reportMemoryUsage(void*, int64_t bytes, int64_t, int64_t, c10::Device device) override {
    if (device.type() == c10::DeviceType::CPU) live += bytes;
  }
  bool memoryProfilingEnabled() const override { return true; }
};

// A hook that allocates a large tensor itself (once per report, not for its own).
struct AllocatingHook : c10::MemoryReportingInfoBase {
  std::atomic<int> reports{0};
  bool inside = false;
  void reportMemoryUsage(void*, int64_t, int64_t, int64_t, c10::Device) override {
    ++reports;
    if (inside) return;
    inside = true;
    { at::Tensor scratch = bytes_tensor(kMiB); }  // its allocation and its free report inside
    inside = false;
  }
  bool memoryProfilingEnabled() const override { return true; }
};

}  // namespace

TEST_CASE("large tensors come from the pool, small ones from LibTorch's allocator") {
  REQUIRE(pool_on());  // not with ZERO_HOST_POOL=0 in the environment
  const zero::HostPoolStats s0 = zero::host_pool_stats();
  CHECK(s0.min_bytes == 256 * 1024);
  at::Tensor small = bytes_tensor(s0.min_bytes - 1);
  CHECK(zero::host_pool_stats().allocations == s0.allocations);
  at::Tensor large = bytes_tensor(s0.min_bytes);
  const zero::HostPoolStats s1 = zero::host_pool_stats();
  CHECK(s1.allocations == s0.allocations + 1);
  CHECK(s1.in_use_bytes == s0.in_use_bytes + s0.min_bytes);
  CHECK(reinterpret_cast<uintptr_t>(large.data_ptr()) % 4096 == 0);
  large.fill_(7);
  CHECK(large.sum().item<int64_t>() == 7 * s0.min_bytes);
  large.reset();
  CHECK(zero::host_pool_stats().in_use_bytes == s0.in_use_bytes);
}

TEST_CASE("raw allocations of either size go back to whoever served them") {
  REQUIRE(pool_on());
  c10::Allocator* cpu = c10::GetCPUAllocator();
  const zero::HostPoolStats s0 = zero::host_pool_stats();
  void* small = cpu->raw_allocate(1000);
  void* large = cpu->raw_allocate(2 * kMiB);
  CHECK(zero::host_pool_stats().in_use_bytes == s0.in_use_bytes + 2 * kMiB);
  std::memset(small, 1, 1000);
  std::memset(large, 2, 2 * kMiB);
  cpu->raw_deallocate(small);  // LibTorch's own free, through the pool's raw deleter
  cpu->raw_deallocate(large);
  CHECK(zero::host_pool_stats().in_use_bytes == s0.in_use_bytes);
}

TEST_CASE("a repeated step lands on the same addresses and does not grow") {
  REQUIRE(pool_on());
  const std::vector<int64_t> sizes = {3 * kMiB, 1 * kMiB + 123, 6 * kMiB, 512 * 1024, 2 * kMiB};
  at::Tensor long_lived;
  std::vector<void*> first = run_step(sizes);
  // Something the first step leaves behind (an optimizer's state made at its first step).
  long_lived = bytes_tensor(5 * kMiB);
  zero::host_pool_step_boundary();
  std::vector<void*> second = run_step(sizes);
  zero::host_pool_step_boundary();
  const int64_t top = zero::host_pool_stats().resident_bytes;
  for (int step = 0; step < 3; ++step) {
    CHECK(run_step(sizes) == second);
    zero::host_pool_step_boundary();
    CHECK(zero::host_pool_stats().resident_bytes == top);
  }
}

TEST_CASE("freed neighbours coalesce and the lowest fitting address is taken") {
  REQUIRE(pool_on());
  at::Tensor a = bytes_tensor(2 * kMiB), b = bytes_tensor(3 * kMiB), c = bytes_tensor(kMiB);
  char* a_at = static_cast<char*>(a.data_ptr());
  CHECK(static_cast<char*>(b.data_ptr()) == a_at + 2 * kMiB);
  a.reset();
  b.reset();
  // 5 MiB fits only in a and b together.
  at::Tensor ab = bytes_tensor(5 * kMiB);
  CHECK(static_cast<char*>(ab.data_ptr()) == a_at);
  ab.reset();
  at::Tensor lower = bytes_tensor(kMiB);
  CHECK(static_cast<char*>(lower.data_ptr()) == a_at);
}

TEST_CASE("a step boundary gives back what lies above the last step's highest address") {
  REQUIRE(pool_on());
  zero::host_pool_step_boundary();
  const int64_t released0 = zero::host_pool_stats().released_bytes;
  {
    at::Tensor big = bytes_tensor(256 * kMiB);
    big.fill_(1);  // touched: resident
  }
  const int64_t rss_touched = rss_bytes();
  // The step that used it keeps its pages (the next step will probably need them again).
  zero::host_pool_step_boundary();
  CHECK(zero::host_pool_stats().released_bytes == released0);
  // A step that did not go as high: the pages above go back.
  zero::host_pool_step_boundary();
  CHECK(zero::host_pool_stats().released_bytes >= released0 + 256 * kMiB);
  CHECK(rss_bytes() < rss_touched - 200 * kMiB);
  // And the range is still usable, zeroed as fresh memory is.
  at::Tensor again = bytes_tensor(256 * kMiB);
  CHECK(again.sum().item<int64_t>() == 0);
}

TEST_CASE("threads allocating at once keep their own bytes") {
  REQUIRE(pool_on());
  const int64_t in_use0 = zero::host_pool_stats().in_use_bytes;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t, &wrong] {
      std::vector<at::Tensor> held;
      for (int i = 0; i < 200; ++i) {
        const int64_t bytes = (1 + (i * 7 + t * 13) % 9) * 300 * 1024;
        at::Tensor x = at::full({bytes / 4}, static_cast<float>(t * 1000 + i));
        held.push_back(x);
        if (held.size() > 5) {
          at::Tensor old = held.front();
          held.erase(held.begin());
          const float v = old[0].item<float>();
          if (!old.eq(v).all().item<bool>()) ++wrong;
        }
      }
    });
  for (std::thread& th : threads) th.join();
  CHECK(wrong == 0);
  CHECK(zero::host_pool_stats().in_use_bytes == in_use0);
}

TEST_CASE("the profiler's memory hook sees pool tensors") {
  REQUIRE(pool_on());
  auto hook = std::make_shared<ProfilerHook>();
  c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, hook);
  {
    at::Tensor t = bytes_tensor(3 * kMiB + 5);
    CHECK(hook->live == 3 * kMiB + 5);
  }
  CHECK(hook->live == 0);
}

TEST_CASE("a profiler hook may allocate from the pool itself") {
  REQUIRE(pool_on());
  auto hook = std::make_shared<AllocatingHook>();
  c10::DebugInfoGuard guard(c10::DebugInfoKind::PROFILER_STATE, hook);
  { at::Tensor t = bytes_tensor(2 * kMiB); }  // deadlocked when the pool reported under its lock
  CHECK(hook->reports >= 2);
}
