// GradCopier: the GPU path records an event on the producing stream, makes the copy stream wait
// on it, copies there (non_blocking into pinned memory) and tells the caching allocator the
// piece is in use on the copy stream; wait() synchronizes on the last copy's event.
#include "grad_copy.h"

#include <spdlog/spdlog.h>

#if defined(ZERO_TORCH_HAS_CUDA)
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <optional>
#endif

namespace zero::offload {

#if defined(ZERO_TORCH_HAS_CUDA)
struct GradCopier::Cuda {
  explicit Cuda(c10::DeviceIndex device)
      : stream(c10::cuda::getStreamFromPool(/*isHighPriority=*/false, device)) {}
  c10::cuda::CUDAStream stream;
  at::cuda::CUDAEvent done;
  bool pending = false;
};
#else
struct GradCopier::Cuda {};
#endif

GradCopier::GradCopier() = default;
GradCopier::~GradCopier() {
  try {
    wait();
  } catch (const std::exception& e) {  // no step follows to report it
    spdlog::error(
        "offload: a gradient copy to the host, pending when the optimizer was "
        "destroyed, failed: {}",
        e.what());
  }
}

void GradCopier::copy(const at::Tensor& host, const at::Tensor& piece) {
#if defined(ZERO_TORCH_HAS_CUDA)
  if (piece.is_cuda()) {
    const c10::DeviceIndex device = piece.device().index();
    if (!cuda_) cuda_ = std::make_unique<Cuda>(device);
    at::cuda::CUDAEvent produced;
    produced.record(c10::cuda::getCurrentCUDAStream(device));
    produced.block(cuda_->stream);
    {
      c10::cuda::CUDAStreamGuard guard(cuda_->stream);
      host.copy_(piece, /*non_blocking=*/host.is_pinned());
    }
    c10::cuda::CUDACachingAllocator::recordStream(piece.storage().data_ptr(), cuda_->stream);
    cuda_->done.record(cuda_->stream);
    cuda_->pending = true;
    return;
  }
#endif
  host.copy_(piece);
}

void GradCopier::wait() {
#if defined(ZERO_TORCH_HAS_CUDA)
  if (cuda_ && cuda_->pending) {
    cuda_->done.synchronize();
    cuda_->pending = false;
  }
#endif
}

}  // namespace zero::offload
