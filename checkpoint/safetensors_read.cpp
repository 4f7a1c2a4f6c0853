// SafetensorsReader: opens a file, reads and validates its length prefix and header (never the
// data), then serves bounds-checked pread()s of byte ranges of single tensors.
#include <unistd.h>

#include <utility>

#include <zero/checkpoint/safetensors.h>

#include "posix_io.h"
#include "safetensors_detail.h"

namespace zero::ckpt {

SafetensorsReader::SafetensorsReader(std::string path) : path_(std::move(path)) {
  detail::Fd fd = detail::open_regular_file(path_, &file_bytes_);
  if (file_bytes_ < 8)
    throw detail::checkpoint_error(path_, "file of ", file_bytes_,
                                   " bytes is too short for the 8-byte header length "
                                   "(truncated or not a safetensors file)");
  unsigned char prefix[8];
  detail::pread_exact(fd.get(), prefix, sizeof(prefix), 0, path_, "the header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | prefix[i];  // little-endian on every host
  if (n > static_cast<uint64_t>(kMaxHeaderBytes))
    throw detail::checkpoint_error(path_, "header length ", n, " exceeds the limit of ",
                                   kMaxHeaderBytes, " bytes (corrupted or not a safetensors file)");
  if (n > static_cast<uint64_t>(file_bytes_ - 8))
    throw detail::checkpoint_error(path_, "header length ", n, " runs past the end of the ",
                                   file_bytes_, "-byte file (truncated or not a safetensors file)");
  std::string header(n, '\0');
  detail::pread_exact(fd.get(), header.data(), header.size(), 8, path_, "the header");
  data_offset_ = 8 + static_cast<int64_t>(n);
  tensors_ = parse_safetensors_header(header, file_bytes_ - data_offset_, path_, &metadata_);
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  fd_ = fd.release();
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsReader::SafetensorsReader(SafetensorsReader&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      file_bytes_(other.file_bytes_),
      data_offset_(other.data_offset_),
      tensors_(std::move(other.tensors_)),
      index_(std::move(other.index_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsReader& SafetensorsReader::operator=(SafetensorsReader&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    file_bytes_ = other.file_bytes_;
    data_offset_ = other.data_offset_;
    tensors_ = std::move(other.tensors_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

const TensorInfo* SafetensorsReader::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsReader::read(const TensorInfo& t, int64_t byte_begin, int64_t byte_end,
                             void* out) const {
  const std::string tensor = "tensor " + detail::quoted(t.name);
  if (fd_ < 0)
    throw detail::checkpoint_error(path_, "read of ", tensor, " from a moved-from reader");
  // t may not come from this file: check it against the validated data buffer too.
  const int64_t data_bytes = file_bytes_ - data_offset_;
  if (t.begin < 0 || t.end < t.begin || t.end > data_bytes)
    throw detail::checkpoint_error(path_, tensor, ": data [", t.begin, ", ", t.end,
                                   ") lies outside the file's ", data_bytes, " data bytes");
  if (byte_begin < 0 || byte_end < byte_begin || byte_end > t.nbytes())
    throw detail::checkpoint_error(path_, tensor, ": read of bytes [", byte_begin, ", ", byte_end,
                                   ") outside its ", t.nbytes(), " bytes");
  if (byte_end == byte_begin) return;
  const std::string what = tensor + " data";
  detail::pread_exact(fd_, out, static_cast<size_t>(byte_end - byte_begin),
                      data_offset_ + t.begin + byte_begin, path_, what.c_str());
}

}  // namespace zero::ckpt
