// AlignedBuffer and align_up (aligned_buffer.h): posix_memalign'ed memory, freed once.
#include <zero/error.h>
#include <zero/offload/aligned_buffer.h>

#include <cstdlib>
#include <new>
#include <utility>

namespace zero::offload {

int64_t align_up(int64_t bytes, int64_t to) {
  ZERO_CHECK(bytes >= 0, UsageError, "align_up: negative byte count ", bytes);
  ZERO_CHECK(to > 0 && (to & (to - 1)) == 0, UsageError, "align_up: alignment ", to,
             " is not a power of two");
  return (bytes + to - 1) & ~(to - 1);
}

AlignedBuffer::AlignedBuffer(int64_t bytes) {
  ZERO_CHECK(bytes >= 0, UsageError, "AlignedBuffer: negative size ", bytes);
  size_bytes_ = align_up(bytes);
  if (size_bytes_ == 0) return;
  void* p = nullptr;
  if (::posix_memalign(&p, static_cast<size_t>(kIoAlign), static_cast<size_t>(size_bytes_)) != 0)
    throw std::bad_alloc();
  data_ = p;
}

AlignedBuffer::~AlignedBuffer() {
  std::free(data_);
}

AlignedBuffer::AlignedBuffer(AlignedBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)) {}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& other) noexcept {
  if (this != &other) {
    std::free(data_);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
  }
  return *this;
}

}  // namespace zero::offload
