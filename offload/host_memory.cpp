// Host memory for offloaded optimizer states: pinned through LibTorch's CUDA host allocator
// when this process sees a GPU (so device copies can be asynchronous), page-aligned otherwise
// (what O_DIRECT reads and writes need, and never sharing a page with unrelated data).
#include <zero/error.h>
#include <zero/offload/offload_optimizer.h>

#include <ATen/ATen.h>
#include <ATen/Context.h>

#include <cstdlib>
#include <new>

namespace zero::offload {

namespace {
constexpr size_t kPageBytes = 4096;
}

at::Tensor host_empty(int64_t numel, at::ScalarType dtype, bool pin) {
  const auto options = at::TensorOptions().dtype(dtype).device(at::kCPU);
  if (pin && at::hasCUDA()) return at::empty({numel}, options.pinned_memory(true));
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  const size_t rounded = (std::max<size_t>(bytes, 1) + kPageBytes - 1) / kPageBytes * kPageBytes;
  void* data = nullptr;
  if (posix_memalign(&data, kPageBytes, rounded) != 0) throw std::bad_alloc();
  return at::from_blob(
      data, {numel}, [](void* p) { std::free(p); }, options);
}

}  // namespace zero::offload
