// libFuzzer target for the safetensors reader: the input is a whole file image. Parsed from
// memory and opened from a memfd, it must be refused with a CheckpointError or yield tensors
// whose ranges lie inside the data, do not overlap, match their shapes, and read back equal.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/safetensors.h>

using namespace zero::ckpt;

// A broken promise of the validation: abort, so libFuzzer keeps the input.
#define ZERO_FUZZ_ASSERT(cond)                                                            \
  do {                                                                                    \
    if (!(cond)) {                                                                        \
      fprintf(stderr, "checkpoint_fuzz: %s:%d: broken: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                       \
    }                                                                                     \
  } while (0)

namespace {

// What validation promises about every tensor it accepts.
void check_accepted(const std::vector<TensorInfo>& tensors, int64_t data_bytes) {
  std::set<std::string> names;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const TensorInfo& t : tensors) {
    ZERO_FUZZ_ASSERT(!t.name.empty() && names.insert(t.name).second);
    ZERO_FUZZ_ASSERT(0 <= t.begin && t.begin <= t.end && t.end <= data_bytes);
    int64_t n = dtype_bytes(t.dtype);
    for (int64_t d : t.shape) {
      ZERO_FUZZ_ASSERT(d >= 0 && !__builtin_mul_overflow(n, d, &n));
    }
    ZERO_FUZZ_ASSERT(t.nbytes() == n && t.numel() * dtype_bytes(t.dtype) == n);
    if (n > 0) ranges.emplace_back(t.begin, t.end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    ZERO_FUZZ_ASSERT(ranges[i - 1].second <= ranges[i].first);
}

// The input as a file: one memfd, reused, opened by path as a checkpoint file would be.
const std::string* memfd_path() {
  static const std::string* path = [] {
    int fd = memfd_create("checkpoint_fuzz", MFD_CLOEXEC);
    return fd < 0 ? nullptr : new std::string("/proc/self/fd/" + std::to_string(fd));
  }();
  return path;
}

bool write_memfd(const uint8_t* data, size_t size) {
  const std::string* path = memfd_path();
  if (!path) return false;
  int fd = std::atoi(path->c_str() + std::strlen("/proc/self/fd/"));
  if (ftruncate(fd, 0) != 0) return false;
  for (size_t done = 0; done < size;) {
    ssize_t w = pwrite(fd, data + done, size - done, static_cast<off_t>(done));
    if (w <= 0) return false;
    done += static_cast<size_t>(w);
  }
  return true;
}

// An input that starts with '{' is a manifest: refused with a CheckpointError, or every index
// and range in it is inside what it declares.
void fuzz_manifest(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  Manifest m;
  try {
    m = manifest_from_json(j, "fuzz manifest");
  } catch (const CheckpointError&) {
    return;
  }
  ZERO_FUZZ_ASSERT(static_cast<int>(m.files.size()) == m.world_size);
  for (const ManifestFile& f : m.files) {
    ZERO_FUZZ_ASSERT(f.name.find('/') == std::string::npos && f.name != "..");
    for (const ManifestPiece& p : f.pieces) {
      ZERO_FUZZ_ASSERT(p.param >= 0 && p.param < static_cast<int>(m.params.size()));
      ZERO_FUZZ_ASSERT(0 <= p.begin && p.begin < p.end && p.end <= m.params[p.param].numel());
    }
  }
  (void)manifest_to_json(m).dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == '{') {
    fuzz_manifest(data, size);
    return 0;
  }
  // From memory: the length prefix, then the header against the rest as the data buffer.
  bool parsed = false;
  std::vector<TensorInfo> tensors;
  std::map<std::string, std::string> metadata;
  int64_t data_start = 0;
  if (size >= 8) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n <= static_cast<uint64_t>(kMaxHeaderBytes) && n <= size - 8) {
      data_start = 8 + static_cast<int64_t>(n);
      std::string_view header(reinterpret_cast<const char*>(data) + 8, n);
      try {
        tensors = parse_safetensors_header(header, static_cast<int64_t>(size) - data_start, "fuzz",
                                           &metadata);
        parsed = true;
      } catch (const CheckpointError&) {
      }
    }
  }
  if (parsed) {
    check_accepted(tensors, static_cast<int64_t>(size) - data_start);
    for (const TensorInfo& t : tensors) {  // in bounds by the check above; ASan watches the copy
      std::vector<uint8_t> copy(static_cast<size_t>(t.nbytes()));
      if (!copy.empty()) std::memcpy(copy.data(), data + data_start + t.begin, copy.size());
    }
  }

  // From a file: the reader must agree with the parse and read back the same bytes.
  if (!write_memfd(data, size)) return 0;
  try {
    SafetensorsReader r(*memfd_path());
    ZERO_FUZZ_ASSERT(parsed && r.data_offset() == data_start);
    ZERO_FUZZ_ASSERT(r.file_bytes() == static_cast<int64_t>(size) && r.metadata() == metadata);
    ZERO_FUZZ_ASSERT(r.tensors().size() == tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const TensorInfo& t = r.tensors()[i];
      ZERO_FUZZ_ASSERT(t.name == tensors[i].name && t.begin == tensors[i].begin &&
                       t.end == tensors[i].end && t.shape == tensors[i].shape);
      ZERO_FUZZ_ASSERT(r.find(t.name) == &t);
      std::vector<uint8_t> out(static_cast<size_t>(t.nbytes()));
      r.read_all(t, out.data());
      ZERO_FUZZ_ASSERT(out.empty() ||
                       std::memcmp(out.data(), data + data_start + t.begin, out.size()) == 0);
      if (t.nbytes() >= 2) {
        r.read(t, 1, t.nbytes() - 1, out.data());
        ZERO_FUZZ_ASSERT(std::memcmp(out.data(), data + data_start + t.begin + 1, out.size() - 2) ==
                         0);
      }
    }
  } catch (const CheckpointError&) {
    ZERO_FUZZ_ASSERT(!parsed);
  }
  return 0;
}
