// The host pool (host_pool.h): a first-fit, address-ordered allocator of page-aligned blocks in
// one reserved range, installed in front of c10's CPU allocator for allocations above a size.
// Address order keeps the live blocks packed at the bottom, so the same step's allocations land
// on the same pages each time; the range is reserved PROT_NONE and made writable as it grows, so
// the reservation costs no memory and no commit charge.
#include <zero/engine/host_pool.h>
#include <zero/error.h>

#include <c10/core/CPUAllocator.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <unordered_map>

namespace zero {
namespace {

constexpr int64_t kDefaultMinBytes = 256 << 10;
// The range is made writable in steps of this much (fewer mprotect calls, one VMA).
constexpr size_t kCommitGranule = size_t{64} << 20;

size_t page_bytes() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

class HostPool final : public c10::Allocator {
 public:
  HostPool(c10::Allocator* fallback, char* base, size_t reserved_bytes, int64_t min_bytes)
      : fallback_(fallback), base_(base), reserved_(reserved_bytes), min_bytes_(min_bytes) {}

  c10::DataPtr allocate(size_t n) const override {
    if (static_cast<int64_t>(n) < min_bytes_) return fallback_->allocate(n);
    void* p = const_cast<HostPool*>(this)->take(n);
    if (p == nullptr) return fallback_->allocate(n);
    return {p, p, &HostPool::release_raw, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &HostPool::release_raw; }

  // Gives back every free block that stayed free since the previous boundary (all free blocks
  // when `everything`), then starts a new epoch.
  void boundary(bool everything) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [offset, f] : free_) {
      if (f.released || (!everything && f.epoch == epoch_)) continue;
      // MADV_DONTNEED on private anonymous pages frees them now; a later touch maps zeroed
      // pages, which any allocator's fresh memory also is.
      if (madvise(base_ + offset, f.bytes, MADV_DONTNEED) != 0) continue;
      f.released = true;
      stats_.released_bytes += static_cast<int64_t>(f.bytes);
    }
    ++epoch_;
  }

  HostPoolStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    HostPoolStats s = stats_;
    s.active = true;
    s.min_bytes = min_bytes_;
    s.reserved_bytes = static_cast<int64_t>(reserved_);
    s.in_use_bytes = static_cast<int64_t>(in_use_);
    s.top_bytes = static_cast<int64_t>(end_);
    s.resident_bytes = static_cast<int64_t>(end_);
    for (const auto& [offset, f] : free_) {
      if (offset + f.bytes == end_) s.top_bytes = static_cast<int64_t>(offset);
      if (f.released) s.resident_bytes -= static_cast<int64_t>(f.bytes);
    }
    return s;
  }

  static HostPool* instance;

 private:
  struct Free {
    size_t bytes;
    uint64_t epoch;  // when it last changed by a free
    bool released;   // its pages were given back (all of them)
  };
  struct Used {
    size_t bytes;      // page-rounded, what the block takes
    size_t requested;  // what the caller asked for
  };

  static void release_raw(void* p) { instance->give(p); }

  // The profiler's hook runs after the mutex is released: a hook may allocate too.
  void* take(size_t n) {
    void* p = nullptr;
    Totals totals;
    {
      std::lock_guard<std::mutex> lock(mu_);
      p = carve(n);
      totals = {static_cast<int64_t>(in_use_), static_cast<int64_t>(end_)};
    }
    if (p != nullptr) report(p, static_cast<int64_t>(n), totals);
    return p;
  }

  // A block of at least n bytes (mutex held), or null where the range cannot hold it.
  void* carve(size_t n) {
    const size_t bytes = round_up(std::max<size_t>(n, 1), page_bytes());
    // Lowest address first; the free block that ends at end_ may be extended past it.
    auto it = free_.begin();
    for (; it != free_.end(); ++it)
      if (it->second.bytes >= bytes || it->first + it->second.bytes == end_) break;
    size_t offset = end_;
    if (it != free_.end()) {
      offset = it->first;
      const Free f = it->second;
      if (f.bytes < bytes && !grow(offset + bytes)) return overflow();
      free_.erase(it);
      if (f.bytes > bytes)
        free_.emplace(offset + bytes, Free{f.bytes - bytes, f.epoch, f.released});
    } else if (!grow(end_ + bytes)) {
      return overflow();
    }
    in_use_ += bytes;
    used_.emplace(base_ + offset, Used{bytes, n});
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, static_cast<int64_t>(in_use_));
    ++stats_.allocations;
    return base_ + offset;
  }

  void give(void* p) {
    if (p == nullptr) return;  // as free(nullptr)
    // raw_deallocate calls raw_deleter() on what raw_allocate gave, also where the fallback
    // allocator served it (below min_bytes).
    if (static_cast<char*>(p) < base_ || static_cast<char*>(p) >= base_ + reserved_) {
      c10::DeleterFnPtr fallback_free = fallback_->raw_deleter();
      ZERO_ASSERT(fallback_free != nullptr, "host pool: freeing ", p,
                  " raw, from an allocator without a raw deleter");
      fallback_free(p);
      return;
    }
    int64_t requested = 0;
    Totals totals;
    {
      std::lock_guard<std::mutex> lock(mu_);
      requested = static_cast<int64_t>(put_back(p));
      totals = {static_cast<int64_t>(in_use_), static_cast<int64_t>(end_)};
    }
    report(p, -requested, totals);
  }

  // Returns p's block to the free blocks (mutex held); what the caller had asked for.
  size_t put_back(void* p) {
    auto u = used_.find(p);
    if (u == used_.end()) {
      spdlog::critical("zero: host pool: freeing {} which it never handed out", p);
      std::abort();
    }
    size_t offset = static_cast<size_t>(static_cast<char*>(p) - base_);
    size_t bytes = u->second.bytes;
    const size_t requested = u->second.requested;
    used_.erase(u);
    in_use_ -= bytes;
    auto next = free_.lower_bound(offset);
    if (next != free_.begin()) {
      auto prev = std::prev(next);
      if (prev->first + prev->second.bytes == offset) {
        offset = prev->first;
        bytes += prev->second.bytes;
        free_.erase(prev);
      }
    }
    if (next != free_.end() && offset + bytes == next->first) {
      bytes += next->second.bytes;
      free_.erase(next);
    }
    // Freed now, and resident at least where the block just freed lies.
    free_.emplace(offset, Free{bytes, epoch_, /*released=*/false});
    return requested;
  }

  // Moves end_ up to `end` (mutex held), making the range writable as far.
  bool grow(size_t end) {
    if (end <= end_) return true;
    if (end > reserved_) return false;
    if (end > committed_) {
      const size_t to = std::min(round_up(end, kCommitGranule), reserved_);
      if (mprotect(base_ + committed_, to - committed_, PROT_READ | PROT_WRITE) != 0) {
        spdlog::warn(
            "zero: host pool: cannot make {} MiB more of its range writable ({}); larger "
            "tensors go to LibTorch's allocator",
            (to - committed_) >> 20, std::strerror(errno));
        return false;
      }
      committed_ = to;
    }
    end_ = end;
    return true;
  }

  void* overflow() {
    ++stats_.overflows;
    return nullptr;
  }

  struct Totals {
    int64_t in_use_bytes = 0;
    int64_t reserved_bytes = 0;  // carved: what the pool holds at most
  };

  // What c10's default allocator tells the profiler's thread-local hook, so that memory profiles
  // see pool tensors as they saw them before.
  static void report(void* p, int64_t delta, const Totals& t) {
    if (c10::memoryProfilingEnabled())
      c10::reportMemoryUsageToProfiler(p, delta, t.in_use_bytes, t.reserved_bytes,
                                       c10::Device(c10::DeviceType::CPU));
  }

  c10::Allocator* fallback_;
  char* base_;
  size_t reserved_;
  int64_t min_bytes_;
  std::mutex mu_;
  std::map<size_t, Free> free_;  // offset -> free block, coalesced, all below end_
  std::unordered_map<void*, Used> used_;
  size_t end_ = 0;        // end of the highest block ever carved; above: never touched
  size_t committed_ = 0;  // writable below
  size_t in_use_ = 0;
  uint64_t epoch_ = 0;  // step boundaries so far
  HostPoolStats stats_;
};

HostPool* HostPool::instance = nullptr;

int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  ZERO_CHECK(*end == '\0' && x >= 0, ConfigError, name, "='", v,
             "': expected a non-negative integer");
  return x;
}

}  // namespace

void use_host_pool() {
  static std::once_flag once;
  std::call_once(once, [] {
    if (env_int("ZERO_HOST_POOL", 1) == 0) return;
    const int64_t min_bytes =
        std::max<int64_t>(env_int("ZERO_HOST_POOL_MIN_BYTES", kDefaultMinBytes), 1);
    // As much address space as the machine has memory: a tensor the pool cannot hold goes to the
    // old allocator, so the range bounds nothing but what the pool serves.
    const size_t reserved =
        round_up(static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) * page_bytes(), kCommitGranule);
    void* base =
        mmap(nullptr, reserved, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) {
      spdlog::warn(
          "zero: host pool: cannot reserve {} MiB of address space ({}); LibTorch's CPU "
          "allocator stays",
          reserved >> 20, std::strerror(errno));
      return;
    }
    // Never freed: tensors allocated from it may outlive every static destructor.
    HostPool::instance =
        new HostPool(c10::GetCPUAllocator(), static_cast<char*>(base), reserved, min_bytes);
    // Above c10's default; the allocation counter (allocations.cpp), of the same priority,
    // installs the pool first and then goes in front of it.
    c10::SetCPUAllocator(HostPool::instance, /*priority=*/1);
  });
}

void host_pool_step_boundary() {
  if (HostPool::instance != nullptr) HostPool::instance->boundary(/*everything=*/false);
}

void host_pool_trim() {
  if (HostPool::instance != nullptr) HostPool::instance->boundary(/*everything=*/true);
}

HostPoolStats host_pool_stats() {
  return HostPool::instance != nullptr ? HostPool::instance->stats() : HostPoolStats{};
}

}  // namespace zero
