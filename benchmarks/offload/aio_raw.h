// The disk's raw throughput through the io_uring swap layer, and fio's on the same pattern: what
// aio_bench prints and what a pipeline benchmark measures in the same run to compare against.
#pragma once

#include <zero/offload/aio.h>

#include <cstdint>
#include <string>

namespace zero::bench {

struct RawIoResult {
  int64_t bytes = 0;
  double first_write_s = 0;        // into freshly preallocated (unwritten) extents
  double write_s = 0, read_s = 0;  // overwrite, as every step after the first does; read
  double first_write_gbps() const { return first_write_s > 0 ? bytes / first_write_s / 1e9 : 0; }
  double write_gbps() const { return write_s > 0 ? bytes / write_s / 1e9 : 0; }
  double read_gbps() const { return read_s > 0 ? bytes / read_s / 1e9 : 0; }
};

// Creates a SwapDir under dir (job id "aio_bench-<pid>-<n>", removed at the end) with one file
// of `bytes` (rounded up to kIoAlign), writes it with AioEngine(options) from a buffer of
// min(bytes, buffer_bytes) of random data (requests of the buffer's size, all issued at once,
// then wait_all) twice: the first write fills the preallocated extents, the second overwrites
// them (as fio, which lays its file out first, and as a swap file every step after the first).
// Then reads it back the same way into the poisoned buffer and checks the data. Times are from
// the first request to wait_all's return. Throws zero::Error on failure.
RawIoResult measure_aio_raw(const std::string& dir, int64_t bytes,
                            const offload::AioOptions& options,
                            int64_t buffer_bytes = int64_t{256} << 20);

// fio with the same pattern: rw=write then rw=read of one file under dir, bs=block_size,
// iodepth=queue_depth, numjobs=intra_op_parallelism (each job a disjoint 1/n of the file),
// ioengine=io_uring, direct=1. *why_not says why when it did not run (no fio, fio failed);
// then the result is zero.
RawIoResult measure_fio(const std::string& dir, int64_t bytes, const offload::AioOptions& options,
                        std::string* why_not);

}  // namespace zero::bench
