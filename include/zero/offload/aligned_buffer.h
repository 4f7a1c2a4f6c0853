// Page-aligned host memory for O_DIRECT transfers: the buffers AioEngine reads into and writes
// from. kIoAlign is the alignment of every buffer, file offset and size handed to the kernel.
#pragma once

#include <cstdint>

namespace zero::offload {

constexpr int64_t kIoAlign = 4096;  // O_DIRECT alignment of buffers, offsets and sizes

// Rounds bytes up to a multiple of `to` (a power of two); bytes >= 0.
int64_t align_up(int64_t bytes, int64_t to = kIoAlign);

// Owned host memory aligned to kIoAlign; move-only, freed in the destructor. The contents are
// left uninitialized (a 1 GiB buffer is not touched until used).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  // bytes >= 0, rounded up to kIoAlign; throws std::bad_alloc when the memory is not there and
  // UsageError for a negative size.
  explicit AlignedBuffer(int64_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& other) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return data_; }
  int64_t size_bytes() const { return size_bytes_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(data_);
  }

 private:
  void* data_ = nullptr;
  int64_t size_bytes_ = 0;
};

}  // namespace zero::offload
