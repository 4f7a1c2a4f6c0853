// StateReader (see checkpoint_read.h): pread into the tensor itself, or chunk by chunk through
// a staging buffer for other dtypes, devices and strides.
#include "save_load/read.h"

#include <zero/error.h>

#include <ATen/ATen.h>

#include <algorithm>

namespace zero::detail {

StateReader::StateReader(ckpt::CheckpointReader& reader, int64_t chunk_numel)
    : reader_(reader), chunk_numel_(chunk_numel) {
  ZERO_ASSERT(chunk_numel_ > 0, "staging chunk of ", chunk_numel_, " elements");
}

void StateReader::read(const std::string& kind, int param, int64_t begin, int64_t end,
                       const at::Tensor& dst, int tensor_rank) {
  auto read_into = [&](int64_t b, int64_t e, float* out) {
    if (tensor_rank < 0)
      reader_.read_state(kind, param, b, e, out);
    else
      reader_.read_slice(kind, param, tensor_rank, b, e, out);
  };
  const int64_t n = end - begin;
  ZERO_ASSERT(dst.dim() == 1 && dst.numel() == n, "reading ", n, " elements into a tensor of ",
              dst.sizes());
  if (dst.is_cpu() && dst.scalar_type() == at::kFloat && dst.is_contiguous()) {
    read_into(begin, end, dst.data_ptr<float>());
    return;
  }
  const int64_t chunk = std::min(n, chunk_numel_);
  if (static_cast<int64_t>(staging_.size()) < chunk) staging_.resize(static_cast<size_t>(chunk));
  const auto fp32 = at::TensorOptions().dtype(at::kFloat);
  for (int64_t done = 0; done < n; done += chunk) {
    const int64_t m = std::min(chunk, n - done);
    read_into(begin + done, begin + done + m, staging_.data());
    // A synchronous copy: the chunk is free to be refilled when copy_ returns.
    dst.narrow(0, done, m).copy_(at::from_blob(staging_.data(), {m}, fp32));
    staged_numel_ += m;
  }
}

}  // namespace zero::detail
