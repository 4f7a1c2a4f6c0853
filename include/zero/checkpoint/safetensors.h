// The safetensors file format (huggingface/safetensors): a writer that streams tensors to a new
// file with its CRC32C, and a reader that validates the header of an untrusted file before any
// read.
//
// Layout: 8-byte little-endian u64 N; N bytes of UTF-8 JSON header
//   {"__metadata__": {str: str}, "<name>": {"dtype": "F32", "shape": [..],
//    "data_offsets": [begin, end]}, ...}
// (padded with spaces so that the data starts 8-aligned); then the data buffer, offsets relative
// to its start, little-endian, row-major.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <zero/checkpoint/digest.h>
#include <zero/checkpoint/errors.h>

namespace zero::ckpt {

// The reference implementation's limit on the JSON header.
constexpr int64_t kMaxHeaderBytes = 100'000'000;

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

const char* dtype_name(DType dtype);                      // "F64", "F32", ..., "U8", "BOOL"
std::optional<DType> parse_dtype(std::string_view name);  // nullopt for an unknown name
int64_t dtype_bytes(DType dtype);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets in the data buffer: [begin, end)
  int64_t numel() const;       // 1 for a scalar (shape [])
  int64_t nbytes() const { return end - begin; }
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel * dtype_bytes contiguous bytes (may be null when 0)
};

// Writes a new file at `path` with the tensors' data in the given order, computing the CRC32C
// of the whole file on the way; fsyncs the file (not its directory: see publish_dir). Refuses to
// overwrite: an existing path is a CheckpointError. On any error (bad tensor, ENOSPC, EIO, ...)
// the partial file is removed and the CheckpointError names the path, byte offset and reason.
// `on_written`, when given, is called with each tensor's byte count once it was appended.
FileDigest write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                             const std::map<std::string, std::string>& metadata = {},
                             const std::function<void(int64_t)>& on_written = {});

// Validates a header against a data buffer of `data_bytes` bytes and returns its tensors in
// header order (`metadata`, when given, receives __metadata__). Rejects: malformed JSON or
// UTF-8, duplicate keys, entries that are not {dtype, shape, data_offsets} exactly, unknown
// dtypes, negative or overflowing shapes and offsets, sizes that do not match shape x dtype,
// ranges outside the buffer or overlapping each other, empty names, non-string metadata.
// Errors are CheckpointErrors that start with "checkpoint: <what_for_errors>: ".
std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, int64_t data_bytes,
                                                 const std::string& what_for_errors,
                                                 std::map<std::string, std::string>* metadata);

// An open safetensors file. The constructor reads and validates only the length and header;
// tensor data is read on demand with pread, so a rank reads only the byte ranges it needs.
// Safe on untrusted files: every read is bounds-checked against the validated header and file.
class SafetensorsReader {
 public:
  explicit SafetensorsReader(std::string path);
  ~SafetensorsReader();
  SafetensorsReader(SafetensorsReader&& other) noexcept;
  SafetensorsReader& operator=(SafetensorsReader&& other) noexcept;
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;  // nullptr when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  int64_t file_bytes() const { return file_bytes_; }
  int64_t data_offset() const { return data_offset_; }  // 8 + N: where the data buffer starts

  // Reads bytes [byte_begin, byte_end) of t's data (0 = t's first byte) into out.
  void read(const TensorInfo& t, int64_t byte_begin, int64_t byte_end, void* out) const;
  void read_all(const TensorInfo& t, void* out) const { read(t, 0, t.nbytes(), out); }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t file_bytes_ = 0;
  int64_t data_offset_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors_
  std::map<std::string, std::string> metadata_;
};

}  // namespace zero::ckpt
