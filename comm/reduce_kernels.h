// Element-wise reduction kernels the Gloo backend hands to Gloo (sum / max per dtype, fp16 and
// bf16 accumulate in fp32 per element) and the in-place division that turns a sum into an average.
#pragma once

#include <zero/comm/communicator.h>

#include <c10/core/ScalarType.h>

#include <cstddef>

namespace zero::detail {

// out[i] = a[i] (op) b[i]; out may alias a or b. kAvg reduces as kSum.
using ReduceFn = void (*)(void* out, const void* a, const void* b, size_t n);

// Throws UsageError for dtypes other than float32, float16, bfloat16, int32, int64.
ReduceFn reduce_fn(at::ScalarType dtype, ReduceOp op);
size_t dtype_bytes(at::ScalarType dtype);
void check_supported_dtype(at::ScalarType dtype, const char* what);

// data[i] /= divisor (floats: rounded once to the dtype; integers: truncated toward zero).
void divide_inplace(void* data, size_t n, at::ScalarType dtype, int divisor);

}  // namespace zero::detail
