// qwZ (zero_quantized_weights): stage 3's all-gather of a parameter shard as DeepSpeed's ZeRO++
// sends it: each rank quantizes its shard (read as fp16) to int8 in symmetric blocks with one
// fp32 scale each, the int8 values and the scales are all-gathered, and every rank dequantizes
// the whole into the parameters' buffer (through fp16, then the buffer's dtype). A quarter of an
// fp32 gather's bytes, half of a 16-bit one's.
#pragma once

#include <zero/comm/communicator.h>

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zero::detail {

struct QuantizedGather {
  WorkHandle values, scales;
  at::Tensor values_all;  // int8, world x shard numel
  at::Tensor scales_all;  // fp32 inverse scales, world x blocks
  at::Tensor out;         // the full buffer the dequantized values go to
  int64_t blocks = 0;     // per rank's shard
};

// Quantizes `shard` (fp32, fp16 or bf16, on the CPU or CUDA; numel a multiple of 8) in
// kernels::qwz_group_count(numel) blocks and starts the two all-gathers into `out` (world x
// shard numel, the shard's dtype). On the CPU, UsageError for a shard whose magnitude fp16 cannot
// hold (the values DeepSpeed's quantizer reads are fp16).
QuantizedGather start_quantized_gather(Communicator& comm, const at::Tensor& shard,
                                       const at::Tensor& out);
// Waits for both all-gathers and writes the dequantized values into `out`.
void finish_quantized_gather(QuantizedGather& gather);

}  // namespace zero::detail
