#pragma once
// The host pool: where LibTorch's large CPU tensors live once an engine exists. glibc keeps what
// a step frees in heaps that grow step after step (fragments between long-lived blocks, one heap
// per thread that ever allocated, a mmap threshold that rises after the first large free), so a
// rank's RSS could end far above what any step holds. The pool hands out page-aligned blocks of
// one reserved address range, lowest address first, and coalesces what is freed: a step that
// allocates and frees the same sizes as the one before lands on the same pages, touches no new
// memory and takes no page faults. A free block that no allocation touched for a whole step goes
// back to the OS at the step boundary, and initialize gives back all that is free when it ends
// (its transients, such as the whole model gathered once, do not stay). Small allocations stay
// with the allocator the pool replaced.
//
// ZERO_HOST_POOL=0 keeps LibTorch's allocator; ZERO_HOST_POOL_MIN_BYTES sets the smallest
// allocation the pool takes (default 256 KiB).
#include <cstdint>

namespace zero {

struct HostPoolStats {
  bool active = false;            // installed in front of c10's CPU allocator
  int64_t min_bytes = 0;          // smallest allocation it takes
  int64_t reserved_bytes = 0;     // address space reserved (not memory)
  int64_t in_use_bytes = 0;       // handed out now (page-rounded)
  int64_t peak_in_use_bytes = 0;  // most ever handed out at once
  int64_t top_bytes = 0;          // end of the highest block handed out now
  int64_t resident_bytes = 0;     // at most this much is resident: carved and not given back
  int64_t released_bytes = 0;     // given back to the OS at step boundaries, summed
  int64_t allocations = 0;        // blocks handed out
  int64_t overflows = 0;          // requests the range could not hold (served by the old allocator)
};

// Installs the pool in front of c10's CPU allocator (idempotent, thread-safe; does nothing when
// ZERO_HOST_POOL=0 or the address range cannot be reserved). zero::initialize calls it.
void use_host_pool();

// Gives back to the OS every free block that stayed free since the previous call (nothing when
// the pool is not installed). The engine calls it after each optimizer step.
void host_pool_step_boundary();

// Gives back every free block now (what malloc_trim does for glibc's heap). initialize calls it
// when the engine is built.
void host_pool_trim();

HostPoolStats host_pool_stats();

}  // namespace zero
