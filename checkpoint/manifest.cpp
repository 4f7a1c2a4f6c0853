// The manifest to and from JSON. Reading validates every field a reader later trusts: indices,
// ranges and names come from a file that may have been written by someone else.
#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/errors.h>
#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/safetensors.h>

#include <algorithm>
#include <limits>
#include <map>

namespace zero::ckpt {

using nlohmann::json;

int64_t ManifestParam::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int Manifest::find_param(const std::string& name) const {
  for (size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  return -1;
}

TensorSplit Manifest::split_of(int param) const {
  const ManifestParam& p = params.at(param);
  TensorSplit s;
  s.whole = p.shape;
  if (p.split()) {
    s.dim = p.split_dim;
    s.stride = p.split_stride;
    s.parts = tensor_parallel_size;
  }
  return s;
}

int64_t Manifest::total_state_bytes() const {
  int64_t n = 0;
  for (const auto& f : files) n += f.bytes;
  return n;
}

std::string piece_tensor_name(const std::string& kind, const std::string& param, int64_t begin) {
  return kind + ":" + param + ":" + std::to_string(begin);
}

std::string buffer_tensor_name(const std::string& name) {
  return "module:" + name;
}

json manifest_to_json(const Manifest& m) {
  json j;
  j["format"] = "zero-checkpoint";
  j["format_version"] = m.format_version;
  j["tag"] = m.tag;
  j["world_size"] = m.world_size;
  if (m.tensor_parallel_size > 1) j["tensor_parallel"] = {{"size", m.tensor_parallel_size}};
  if (m.pipeline_parallel_size > 1) j["pipeline"] = {{"stages", m.pipeline_parallel_size}};
  j["stage"] = m.stage;
  j["precision"] = m.precision;
  j["optimizer"] = m.optimizer;
  j["state_kinds"] = m.state_kinds;
  j["config_hash"] = m.config_hash;
  j["counters"] = {{"global_steps", m.global_steps},
                   {"micro_steps", m.micro_steps},
                   {"skipped_steps", m.skipped_steps},
                   {"optimizer_steps", m.optimizer_steps},
                   {"scheduler_steps", m.scheduler_steps}};
  if (m.loss_scaler) {
    const LossScalerState& s = *m.loss_scaler;
    j["loss_scaler"] = {{"scale", s.scale},
                        {"hysteresis_left", s.hysteresis_left},
                        {"iteration", s.iteration},
                        {"last_overflow_iteration", s.last_overflow_iteration}};
  } else {
    j["loss_scaler"] = nullptr;
  }
  j["client_state"] = m.client_state;
  if (!m.data_sampler.is_null()) j["data_sampler"] = m.data_sampler;
  json params = json::array();
  for (const auto& p : m.params) {
    json e = {{"name", p.name}, {"shape", p.shape}, {"dtype", p.dtype}};
    if (!p.clean_name.empty() && p.clean_name != p.name) e["clean_name"] = p.clean_name;
    if (p.split()) e["split"] = {{"dim", p.split_dim}, {"stride", p.split_stride}};
    params.push_back(std::move(e));
  }
  j["params"] = params;
  json buffers = json::array();
  for (const auto& b : m.buffers) {
    json e = {{"name", b.name}, {"shape", b.shape}, {"dtype", b.dtype}};
    if (!b.clean_name.empty() && b.clean_name != b.name) e["clean_name"] = b.clean_name;
    buffers.push_back(std::move(e));
  }
  j["buffers"] = buffers;
  json files = json::array();
  for (const auto& f : m.files) {
    json pieces = json::array();
    for (const auto& p : f.pieces) pieces.push_back({p.param, p.begin, p.end});
    json e = {{"name", f.name},
              {"rank", f.rank},
              {"bytes", f.bytes},
              {"crc32c", f.crc32c},
              {"pieces", pieces}};
    if (m.tensor_parallel_size > 1) e["tensor_rank"] = f.tensor_rank;
    files.push_back(std::move(e));
  }
  j["files"] = files;
  return j;
}

namespace {

std::string out_of_range(int64_t v, int64_t lo, int64_t hi) {
  return ::zero::detail::str(v, " is outside [", lo, ", ", hi, "]");
}

// Typed access with errors that name the manifest and the JSON path.
class Fields {
 public:
  explicit Fields(const std::string& what) : what_(what) {}

  [[noreturn]] void fail(const std::string& path, const std::string& why) const {
    throw detail::checkpoint_error(what_, path, ": ", why);
  }
  const json& at(const json& j, const char* key, const std::string& path) const {
    if (!j.is_object()) fail(path, "expected an object");
    auto it = j.find(key);
    if (it == j.end()) fail(path + "." + key, "missing");
    return *it;
  }
  int64_t integer(const json& j, const std::string& path, int64_t lo = 0,
                  int64_t hi = std::numeric_limits<int64_t>::max()) const {
    if (!j.is_number_integer()) fail(path, "expected an integer");
    const int64_t v = j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX)
                          ? (fail(path, "out of range"), 0)
                          : j.get<int64_t>();
    if (v < lo || v > hi) fail(path, out_of_range(v, lo, hi));
    return v;
  }
  std::string string(const json& j, const std::string& path) const {
    if (!j.is_string()) fail(path, "expected a string");
    return j.get<std::string>();
  }
  // The optional clean name of an entry (written only where it differs from `name`).
  std::string clean_name(const json& entry, const std::string& path,
                         const std::string& name) const {
    auto it = entry.find("clean_name");
    if (it == entry.end()) return name;
    std::string clean = string(*it, path + ".clean_name");
    if (clean.empty() || clean.size() > 1024) fail(path + ".clean_name", "empty or too long");
    return clean;
  }
  std::vector<int64_t> shape(const json& j, const std::string& path) const {
    if (!j.is_array() || j.size() > 16) fail(path, "expected an array of at most 16 sizes");
    std::vector<int64_t> out;
    int64_t numel = 1;
    for (size_t i = 0; i < j.size(); ++i) {
      const int64_t d = integer(j[i], path + "[" + std::to_string(i) + "]", 0, int64_t(1) << 40);
      if (d != 0 && numel > (int64_t(1) << 50) / d) fail(path, "too many elements");
      numel *= d;
      out.push_back(d);
    }
    return out;
  }
  std::string dtype(const json& j, const std::string& path) const {
    const std::string d = string(j, path);
    if (!parse_dtype(d)) fail(path, "unknown dtype '" + d + "'");
    return d;
  }

 private:
  std::string what_;
};

}  // namespace

Manifest manifest_from_json(const json& j, const std::string& what) {
  Fields f(what);
  Manifest m;
  if (!j.is_object()) f.fail("(top)", "expected a JSON object");
  if (f.string(f.at(j, "format", ""), "format") != "zero-checkpoint")
    f.fail("format", "not a zero checkpoint manifest");
  m.format_version = static_cast<int>(f.integer(f.at(j, "format_version", ""), "format_version"));
  if (m.format_version > kFormatVersion)
    f.fail("format_version", ::zero::detail::str("format version ", m.format_version,
                                                 " is newer than this build reads (",
                                                 kFormatVersion, "); use a newer zero to load it"));
  if (m.format_version < 1) f.fail("format_version", "must be >= 1");
  m.tag = f.string(f.at(j, "tag", ""), "tag");
  if (!is_safe_component(m.tag)) f.fail("tag", "'" + m.tag + "' is not a plain directory name");
  m.world_size = static_cast<int>(f.integer(f.at(j, "world_size", ""), "world_size", 1, 1 << 20));
  if (j.contains("tensor_parallel")) {
    if (m.format_version < 2) f.fail("tensor_parallel", "needs format version 2");
    m.tensor_parallel_size =
        static_cast<int>(f.integer(f.at(j["tensor_parallel"], "size", "tensor_parallel"),
                                   "tensor_parallel.size", 1, m.world_size));
    if (m.world_size % m.tensor_parallel_size != 0)
      f.fail("tensor_parallel.size", "does not divide world_size");
  }
  if (j.contains("pipeline")) {
    if (m.format_version < 2) f.fail("pipeline", "needs format version 2");
    m.pipeline_parallel_size = static_cast<int>(
        f.integer(f.at(j["pipeline"], "stages", "pipeline"), "pipeline.stages", 1, m.world_size));
    if (m.world_size % (m.tensor_parallel_size * m.pipeline_parallel_size) != 0)
      f.fail("pipeline.stages", "times tensor_parallel.size does not divide world_size");
  }
  m.stage = static_cast<int>(f.integer(f.at(j, "stage", ""), "stage", 0, 3));
  m.precision = f.string(f.at(j, "precision", ""), "precision");
  if (m.precision != "fp32" && m.precision != "bf16" && m.precision != "fp16")
    f.fail("precision", "'" + m.precision + "' is not fp32, bf16 or fp16");
  m.optimizer = f.string(f.at(j, "optimizer", ""), "optimizer");
  const json& kinds = f.at(j, "state_kinds", "");
  if (!kinds.is_array() || kinds.empty() || kinds.size() > 8)
    f.fail("state_kinds", "expected 1 to 8 names");
  for (size_t i = 0; i < kinds.size(); ++i) {
    std::string k = f.string(kinds[i], "state_kinds[" + std::to_string(i) + "]");
    if (k != "master" && k != "exp_avg" && k != "exp_avg_sq" && k != "momentum_buffer")
      f.fail("state_kinds", "unknown state kind '" + k + "'");
    if (std::count(m.state_kinds.begin(), m.state_kinds.end(), k))
      f.fail("state_kinds", k + " twice");
    m.state_kinds.push_back(std::move(k));
  }
  if (m.state_kinds[0] != "master") f.fail("state_kinds", "the first kind must be master");
  m.config_hash = f.string(f.at(j, "config_hash", ""), "config_hash");
  const json& c = f.at(j, "counters", "");
  m.global_steps = f.integer(f.at(c, "global_steps", "counters"), "counters.global_steps");
  m.micro_steps = f.integer(f.at(c, "micro_steps", "counters"), "counters.micro_steps");
  m.skipped_steps = f.integer(f.at(c, "skipped_steps", "counters"), "counters.skipped_steps");
  m.optimizer_steps = f.integer(f.at(c, "optimizer_steps", "counters"), "counters.optimizer_steps");
  m.scheduler_steps = f.integer(f.at(c, "scheduler_steps", "counters"), "counters.scheduler_steps");
  const json& ls = f.at(j, "loss_scaler", "");
  if (!ls.is_null()) {
    LossScalerState s;
    const json& scale = f.at(ls, "scale", "loss_scaler");
    if (!scale.is_number() || !(scale.get<double>() > 0))
      f.fail("loss_scaler.scale", "must be > 0");
    s.scale = scale.get<double>();
    s.hysteresis_left = static_cast<int>(f.integer(f.at(ls, "hysteresis_left", "loss_scaler"),
                                                   "loss_scaler.hysteresis_left", 0, 1 << 20));
    s.iteration = f.integer(f.at(ls, "iteration", "loss_scaler"), "loss_scaler.iteration");
    s.last_overflow_iteration = f.integer(f.at(ls, "last_overflow_iteration", "loss_scaler"),
                                          "loss_scaler.last_overflow_iteration", -1);
    m.loss_scaler = s;
  }
  m.client_state = f.at(j, "client_state", "");
  if (j.contains("data_sampler")) {
    m.data_sampler = j["data_sampler"];
    if (!m.data_sampler.is_object()) f.fail("data_sampler", "expected an object");
  }

  const json& params = f.at(j, "params", "");
  if (!params.is_array()) f.fail("params", "expected an array");
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string path = "params[" + std::to_string(i) + "]";
    ManifestParam p;
    p.name = f.string(f.at(params[i], "name", path), path + ".name");
    if (p.name.empty() || p.name.size() > 1024) f.fail(path + ".name", "empty or too long");
    p.shape = f.shape(f.at(params[i], "shape", path), path + ".shape");
    p.dtype = f.dtype(f.at(params[i], "dtype", path), path + ".dtype");
    if (m.find_param(p.name) >= 0) f.fail(path + ".name", "'" + p.name + "' appears twice");
    p.clean_name = f.clean_name(params[i], path, p.name);
    if (params[i].contains("split")) {
      const json& sp = params[i]["split"];
      p.split_dim = f.integer(f.at(sp, "dim", path + ".split"), path + ".split.dim", 0,
                              static_cast<int64_t>(p.shape.size()) - 1);
      p.split_stride =
          f.integer(f.at(sp, "stride", path + ".split"), path + ".split.stride", 1, 1 << 20);
      if (p.shape[p.split_dim] % (p.split_stride * m.tensor_parallel_size) != 0)
        f.fail(path + ".split", "the split dimension is not divisible by stride x tensor ranks");
    }
    m.params.push_back(std::move(p));
  }
  const json& buffers = f.at(j, "buffers", "");
  if (!buffers.is_array()) f.fail("buffers", "expected an array");
  for (size_t i = 0; i < buffers.size(); ++i) {
    const std::string path = "buffers[" + std::to_string(i) + "]";
    ManifestBuffer b;
    b.name = f.string(f.at(buffers[i], "name", path), path + ".name");
    if (b.name.empty() || b.name.size() > 1024) f.fail(path + ".name", "empty or too long");
    b.shape = f.shape(f.at(buffers[i], "shape", path), path + ".shape");
    b.dtype = f.dtype(f.at(buffers[i], "dtype", path), path + ".dtype");
    b.clean_name = f.clean_name(buffers[i], path, b.name);
    m.buffers.push_back(std::move(b));
  }
  // Exports key tensors by clean name: two entries may not share one.
  std::map<std::string, std::string> registered_of;
  auto claim = [&](const std::string& clean, const std::string& name, const std::string& path) {
    auto [it, fresh] = registered_of.emplace(clean, name);
    if (!fresh)
      f.fail(path + ".clean_name",
             "'" + name + "' and '" + it->second + "' have the same clean name '" + clean + "'");
  };
  for (size_t i = 0; i < m.params.size(); ++i)
    claim(m.params[i].clean_name, m.params[i].name, "params[" + std::to_string(i) + "]");
  for (size_t i = 0; i < m.buffers.size(); ++i)
    claim(m.buffers[i].clean_name, m.buffers[i].name, "buffers[" + std::to_string(i) + "]");

  const json& files = f.at(j, "files", "");
  if (!files.is_array() || static_cast<int64_t>(files.size()) != m.world_size)
    f.fail("files", "expected one file per rank (world_size " + std::to_string(m.world_size) + ")");
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string path = "files[" + std::to_string(r) + "]";
    ManifestFile file;
    file.name = f.string(f.at(files[r], "name", path), path + ".name");
    if (!is_safe_component(file.name))
      f.fail(path + ".name", "'" + file.name + "' is not a plain file name inside the checkpoint");
    file.rank = static_cast<int>(f.integer(f.at(files[r], "rank", path), path + ".rank"));
    if (file.rank != static_cast<int>(r)) f.fail(path + ".rank", "files must be in rank order");
    file.bytes = f.integer(f.at(files[r], "bytes", path), path + ".bytes");
    if (files[r].contains("tensor_rank"))
      file.tensor_rank = static_cast<int>(
          f.integer(files[r]["tensor_rank"], path + ".tensor_rank", 0, m.tensor_parallel_size - 1));
    file.crc32c = static_cast<uint32_t>(
        f.integer(f.at(files[r], "crc32c", path), path + ".crc32c", 0, 0xffffffffLL));
    const json& pieces = f.at(files[r], "pieces", path);
    if (!pieces.is_array()) f.fail(path + ".pieces", "expected an array");
    for (size_t k = 0; k < pieces.size(); ++k) {
      const std::string pp = path + ".pieces[" + std::to_string(k) + "]";
      if (!pieces[k].is_array() || pieces[k].size() != 3)
        f.fail(pp, "expected [param, begin, end]");
      ManifestPiece piece;
      piece.param = static_cast<int>(
          f.integer(pieces[k][0], pp + "[0]", 0, static_cast<int64_t>(m.params.size()) - 1));
      const ManifestParam& param = m.params[piece.param];  // pieces of a split one: its slice
      const int64_t numel = param.numel() / (param.split() ? m.tensor_parallel_size : 1);
      piece.begin = f.integer(pieces[k][1], pp + "[1]", 0, numel);
      piece.end = f.integer(pieces[k][2], pp + "[2]", piece.begin + 1, numel);
      file.pieces.push_back(piece);
    }
    for (size_t q = 0; q < r; ++q)
      if (m.files[q].name == file.name) f.fail(path + ".name", "'" + file.name + "' twice");
    m.files.push_back(std::move(file));
  }
  return m;
}

Manifest read_manifest(const std::string& dir) {
  const std::string path = dir + "/" + kManifestFile;
  const std::string text = read_small_file(path, size_t(256) << 20);
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded())
    throw detail::checkpoint_error(path, "not valid JSON (truncated or corrupted manifest)");
  return manifest_from_json(j, path);
}

}  // namespace zero::ckpt
