// CheckpointReader: resolves `latest`, indexes which file covers which element range of each
// parameter, and reads ranges with pread through the validated safetensors readers.
#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/reader.h>
#include <zero/text.h>

#include <sys/stat.h>

#include <algorithm>

namespace zero::ckpt {

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

}  // namespace

std::optional<std::string> resolve_checkpoint_dir(const std::string& load_dir,
                                                  const std::string& tag_in) {
  std::string tag = tag_in;
  if (tag.empty()) {
    const std::string latest = load_dir + "/" + kLatestFile;
    struct stat st {};
    if (::stat(latest.c_str(), &st) != 0) return std::nullopt;
    tag = ::zero::detail::trim(read_small_file(latest, 4096));
    if (!is_safe_component(tag))
      throw detail::checkpoint_error(latest, "names '", tag,
                                     "', which is not a plain directory name inside ", load_dir);
  } else if (!is_safe_component(tag)) {
    throw detail::checkpoint_error(load_dir, "tag '", tag,
                                   "' is not a plain directory name (no '/' or '..')");
  }
  const std::string dir = load_dir + "/" + tag;
  if (!is_directory(dir))
    throw detail::checkpoint_error(dir, "no such checkpoint directory (tag '", tag, "')");
  return dir;
}

CheckpointReader::CheckpointReader(std::string dir)
    : dir_(std::move(dir)), manifest_(read_manifest(dir_)) {
  files_.resize(manifest_.files.size());
  covers_.resize(manifest_.params.size());
  for (size_t k = 0; k < manifest_.params.size(); ++k)
    covers_[k].resize(manifest_.params[k].split() ? manifest_.tensor_parallel_size : 1);
  for (const auto& f : manifest_.files)
    for (const auto& p : f.pieces) {
      const int slice = manifest_.params[p.param].split() ? f.tensor_rank : 0;
      covers_[p.param][slice].push_back({f.rank, p.begin, p.end});
    }
  for (auto& per_param : covers_)
    for (auto& c : per_param)
      std::sort(c.begin(), c.end(),
                [](const Cover& a, const Cover& b) { return a.begin < b.begin; });
}

CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

SafetensorsReader& CheckpointReader::file(int rank) {
  if (!files_[rank]) {
    const ManifestFile& mf = manifest_.files[rank];
    const std::string path = dir_ + "/" + mf.name;
    auto reader = std::make_unique<SafetensorsReader>(path);
    if (reader->file_bytes() != mf.bytes)
      throw detail::checkpoint_error(path, "is ", reader->file_bytes(), " bytes but the manifest ",
                                     "says ", mf.bytes, " (truncated, replaced or corrupted)");
    files_[rank] = std::move(reader);
  }
  return *files_[rank];
}

void CheckpointReader::read_state(const std::string& kind, int param, int64_t begin, int64_t end,
                                  float* out) {
  if (!manifest_.params.at(param).split()) return read_slice(kind, param, 0, begin, end, out);
  for (const TensorSplit::Run& r : manifest_.split_of(param).runs_of_whole(begin, end))
    read_slice(kind, param, r.rank, r.slice_begin, r.slice_begin + r.length,
               out + (r.whole_begin - begin));
}

void CheckpointReader::read_slice(const std::string& kind, int param, int tensor_rank,
                                  int64_t begin, int64_t end, float* out) {
  const ManifestParam& p = manifest_.params.at(param);
  int64_t at = begin;
  for (const Cover& c : covers_[param].at(tensor_rank)) {
    if (c.end <= at || c.begin >= end) continue;
    if (c.begin > at) break;  // a hole before this piece
    const int64_t stop = std::min(end, c.end);
    SafetensorsReader& f = file(c.rank);
    const std::string name = piece_tensor_name(kind, p.name, c.begin);
    const TensorInfo* t = f.find(name);
    if (!t || t->dtype != DType::kF32 || t->numel() != c.end - c.begin)
      throw detail::checkpoint_error(f.path(), "tensor '", name, "' is ",
                                     t ? "not F32 of the manifest's size" : "missing",
                                     " (the file does not match the manifest)");
    const int64_t bytes = (stop - at) * 4;
    f.read(*t, (at - c.begin) * 4, (at - c.begin) * 4 + bytes, out + (at - begin));
    bytes_read_ += bytes;
    at = stop;
    if (at == end) return;
  }
  if (at < end)
    throw detail::checkpoint_error(
        dir_, "elements [", at, ", ", end, ") of '", p.name, "'",
        p.split() ? ::zero::detail::str(" (tensor rank ", tensor_rank, "'s slice)") : std::string(),
        " are in no rank file of the manifest");
}

const TensorInfo* CheckpointReader::find_tensor(int rank, const std::string& name) {
  return file(rank).find(name);
}

void CheckpointReader::read_tensor(int rank, const std::string& name, DType dtype, int64_t bytes,
                                   void* out) {
  SafetensorsReader& f = file(rank);
  const TensorInfo* t = f.find(name);
  if (!t || t->dtype != dtype || t->nbytes() != bytes)
    throw detail::checkpoint_error(f.path(), "tensor '", name, "' is ",
                                   t ? "not of the expected dtype and size" : "missing");
  f.read_all(*t, out);
  bytes_read_ += bytes;
}

void CheckpointReader::verify(const std::vector<int>& ranks_in) {
  std::vector<int> ranks = ranks_in;
  if (ranks.empty())
    for (size_t r = 0; r < manifest_.files.size(); ++r) ranks.push_back(static_cast<int>(r));
  for (int r : ranks) {
    const ManifestFile& mf = manifest_.files.at(r);
    const std::string path = dir_ + "/" + mf.name;
    const FileDigest d = digest_file(path);
    if (d.bytes != mf.bytes || d.crc32c != mf.crc32c)
      throw detail::checkpoint_error(path, "checksum mismatch: ", d.bytes, " bytes with CRC32C ",
                                     d.crc32c, ", the manifest says ", mf.bytes, " bytes with ",
                                     mf.crc32c, " (the file was modified or corrupted)");
  }
}

}  // namespace zero::ckpt
