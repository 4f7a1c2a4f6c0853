// write_safetensors: validates the tensors, lays out the header as the reference implementation
// does (space-padded to 8 bytes), and streams header and data to a new file with its CRC32C.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include <zero/checkpoint/safetensors.h>

#include "posix_io.h"
#include "safetensors_detail.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "safetensors data is little-endian; tensors are written as they lie in memory");

namespace zero::ckpt {

namespace {

// A JSON string literal; invalid UTF-8 is an error (nlohmann's strict dump).
std::string json_string(const std::string& s, const std::string& path, const char* what) {
  try {
    return nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    throw detail::checkpoint_error(path, what, " ", detail::quoted(s), " is not valid UTF-8");
  }
}

// The header, padded with spaces so that 8 + its size is a multiple of 8; *nbytes gets each
// tensor's size. Every tensor is checked before anything touches the disk.
std::string make_header(const std::vector<TensorToWrite>& tensors,
                        const std::map<std::string, std::string>& metadata, const std::string& path,
                        std::vector<int64_t>* nbytes) {
  std::string h = "{";
  if (!metadata.empty()) {
    h += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      h += (first ? "" : ",") + json_string(k, path, "metadata key") + ":" +
           json_string(v, path, "metadata value");
      first = false;
    }
    h += "}";
  }
  std::set<std::string> names;
  int64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    const std::string tensor = "tensor " + detail::quoted(t.name) + ": ";
    if (t.name.empty() || t.name == "__metadata__")
      throw detail::checkpoint_error(path, "invalid tensor name ", detail::quoted(t.name));
    if (!names.insert(t.name).second)
      throw detail::checkpoint_error(path, tensor, "name given twice");
    std::optional<int64_t> n = detail::checked_nbytes(t.shape, t.dtype);
    if (!n)
      throw detail::checkpoint_error(path, tensor, "invalid shape ", detail::shape_text(t.shape));
    if (*n > 0 && t.data == nullptr)
      throw detail::checkpoint_error(path, tensor, "no data for ", *n, " bytes");
    h += (h.size() > 1 ? "," : "") + json_string(t.name, path, "tensor name") + ":{\"dtype\":\"" +
         dtype_name(t.dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h += (i ? "," : "") + std::to_string(t.shape[i]);
    h += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + *n) + "]}";
    offset += *n;
    nbytes->push_back(*n);
  }
  h += "}";
  h.append((8 - h.size() % 8) % 8, ' ');
  if (static_cast<int64_t>(h.size()) > kMaxHeaderBytes)
    throw detail::checkpoint_error(path, "header of ", h.size(), " bytes exceeds the limit of ",
                                   kMaxHeaderBytes, " (too many tensors for one file)");
  return h;
}

// Appends to the file through a 4 MiB staging buffer (large pieces go straight to write(2)),
// computing the CRC32C of everything appended.
class StagedWriter {
 public:
  StagedWriter(int fd, const std::string& path) : fd_(fd), path_(path) { buf_.reserve(kBuffer); }
  void append(const void* data, size_t n) {
    digest_.crc32c = crc32c(data, n, digest_.crc32c);
    digest_.bytes += static_cast<int64_t>(n);
    if (n >= kDirect) {
      flush();
      detail::write_all(fd_, data, n, path_, written_);
      written_ += static_cast<int64_t>(n);
      return;
    }
    if (buf_.size() + n > kBuffer) flush();
    const char* p = static_cast<const char*>(data);
    buf_.insert(buf_.end(), p, p + n);
  }
  void flush() {
    detail::write_all(fd_, buf_.data(), buf_.size(), path_, written_);
    written_ += static_cast<int64_t>(buf_.size());
    buf_.clear();
  }
  const FileDigest& digest() const { return digest_; }

 private:
  static constexpr size_t kBuffer = size_t{4} << 20;
  static constexpr size_t kDirect = size_t{1} << 20;
  int fd_;
  const std::string& path_;
  std::vector<char> buf_;
  int64_t written_ = 0;
  FileDigest digest_;
};

}  // namespace

FileDigest write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                             const std::map<std::string, std::string>& metadata,
                             const std::function<void(int64_t)>& on_written) {
  std::vector<int64_t> nbytes;
  const std::string header = make_header(tensors, metadata, path, &nbytes);

  int raw;
  do {
    raw = ::open(path.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOCTTY, 0644);
  } while (raw < 0 && errno == EINTR);
  if (raw < 0 && errno == EEXIST)
    throw detail::checkpoint_error(path, "already exists (checkpoint files are never overwritten)");
  if (raw < 0) throw detail::checkpoint_error(path, "cannot create: ", detail::errno_text(errno));
  detail::Fd fd(raw);
  try {
    StagedWriter out(fd.get(), path);
    unsigned char prefix[8];
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<unsigned char>(header.size() >> (8 * i));
    out.append(prefix, sizeof(prefix));
    out.append(header.data(), header.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (nbytes[i] > 0) out.append(tensors[i].data, static_cast<size_t>(nbytes[i]));
      if (on_written) on_written(nbytes[i]);
    }
    out.flush();
    detail::fsync_fd(fd.get(), path);
    fd.close_checked(path);
    return out.digest();
  } catch (...) {
    fd.reset();
    ::unlink(path.c_str());  // never leave a partial file behind
    throw;
  }
}

}  // namespace zero::ckpt
