// Copies of gradient pieces from the stage's shard (device) to host buffers while backward goes
// on: on a GPU on a copy stream of its own, ordered after the stream that produced the gradients,
// with one event the optimizer step waits on; on the CPU a plain copy.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>

namespace zero::offload {

class GradCopier {
 public:
  GradCopier();
  ~GradCopier();
  GradCopier(const GradCopier&) = delete;
  GradCopier& operator=(const GradCopier&) = delete;

  // host.copy_(device_piece), asynchronous on a GPU when host is pinned. The piece must not be
  // written until wait() returned (the stage zeroes gradients only after the step).
  void copy(const at::Tensor& host, const at::Tensor& piece);
  // Blocks the host until every copy issued so far is done.
  void wait();

 private:
  struct Cuda;
  std::unique_ptr<Cuda> cuda_;  // null until the first device piece (and in a CPU-only build)
};

}  // namespace zero::offload
