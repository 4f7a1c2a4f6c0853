#pragma once
// Counts LibTorch's CPU allocations: every CPU tensor storage allocated through c10's CPU allocator
// (at::empty and everything built on it) once the counter is installed. A training step in steady
// state should allocate only what its model's autograd needs; what the engine adds on top of that
// shows here (gpt_train --json_summary reports the count and bytes per step, floor.sh compares
// them with the no-communication floor).
#include <cstdint>

namespace zero {

struct CpuAllocations {
  int64_t count = 0;  // allocations since the counter was installed
  int64_t bytes = 0;  // their sizes, summed
};

// Puts the counting allocator in front of c10's CPU allocator (idempotent, thread-safe). Storages
// allocated before keep their allocator; only later allocations count. ZERO_ALLOC_TRACE_BYTES=N
// prints the backtrace of every allocation of at least N bytes to stderr (to find where a step
// allocates).
void count_cpu_allocations();

// The totals since count_cpu_allocations() (zeros when it was never called).
CpuAllocations cpu_allocations();

}  // namespace zero
