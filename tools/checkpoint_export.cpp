// `zero checkpoint export DIR OUT [--tag T] [--dtype fp32|bf16|fp16] [--format safetensors|torch]
// [--max-shard-size 5GB] [--keep-wrapper-names]`: the consolidated weights of a sharded checkpoint
// (DeepSpeed's zero_to_fp32.py): each parameter from its fp32 masters, cast to --dtype, plus the
// buffers.
//
// Each parameter is read over its full range from whichever rank files hold its pieces, one at
// a time; ckpt::write_safetensors takes a whole file's tensors at once, so at most one output
// file's worth (one shard) is in memory. Every file goes to a temporary name and is renamed into
// place, and a sharded export writes its index last.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include <torch/serialize.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/manifest.h>
#include <zero/checkpoint/reader.h>
#include <zero/checkpoint/safetensors.h>
#include <zero/error.h>

#include "checkpoint_common.h"
#include "command.h"

namespace zero::tools {
namespace {

constexpr const char* kExportUsage =
    "usage: zero checkpoint export DIR OUT [--tag T] [--dtype fp32|bf16|fp16]\n"
    "                              [--format safetensors|torch] [--max-shard-size 5GB]\n"
    "                              [--keep-wrapper-names]\n"
    "Writes the full weights of the checkpoint DIR/<tag> (tag: --tag, else the one DIR/latest\n"
    "names; DIR may also be a tag directory) to OUT, keyed by parameter name: each parameter\n"
    "from its fp32 master weights cast to --dtype (default fp32), and the model's buffers in\n"
    "their own dtype. Names are the model's own: the `inner.` segments that zero::Sharded and\n"
    "zero::Checkpointed add are removed (as the manifest records them).\n"
    "  --keep-wrapper-names  keys as registered in the training program, wrappers included.\n"
    "  --format safetensors  (default) OUT, e.g. model.safetensors. Weights larger than\n"
    "                        --max-shard-size (default 5GB; 500MB, 1GiB, plain bytes) become\n"
    "                        <stem>-00001-of-0000N.safetensors ... next to OUT plus\n"
    "                        OUT.index.json (Hugging Face's sharded layout) instead, and\n"
    "                        a file OUT from an earlier export is removed.\n"
    "  --format torch        OUT, e.g. model.pt, for Python's torch.load(OUT): a dict of\n"
    "                        tensors; one file only (weights over --max-shard-size are refused).\n"
    "Every file is written under a temporary name and renamed into place when complete.";

struct ExportOptions {
  std::string out;
  bool keep_wrapper_names = false;
  ckpt::DType dtype = ckpt::DType::kF32;
  bool torch_format = false;
  int64_t max_shard_bytes = 5'000'000'000;
};

// One tensor of the output: a parameter (from its masters) or a buffer (from rank 0's file).
struct OutTensor {
  std::string name;      // as registered: the name in the checkpoint's rank files
  std::string out_name;  // the key in the output
  std::vector<int64_t> shape;
  ckpt::DType dtype = ckpt::DType::kF32;
  int64_t numel = 0, bytes = 0;
  int param = -1;  // index in the manifest's params, or -1 for a buffer
};

at::ScalarType scalar_type(ckpt::DType d) {
  switch (d) {
    case ckpt::DType::kF64:
      return at::kDouble;
    case ckpt::DType::kF32:
      return at::kFloat;
    case ckpt::DType::kF16:
      return at::kHalf;
    case ckpt::DType::kBF16:
      return at::kBFloat16;
    case ckpt::DType::kI64:
      return at::kLong;
    case ckpt::DType::kI32:
      return at::kInt;
    case ckpt::DType::kI16:
      return at::kShort;
    case ckpt::DType::kI8:
      return at::kChar;
    case ckpt::DType::kU8:
      return at::kByte;
    case ckpt::DType::kBool:
      return at::kBool;
  }
  throw InternalError("unknown safetensors dtype");
}

std::vector<OutTensor> plan_tensors(const ckpt::Manifest& m, ckpt::DType dtype,
                                    bool keep_wrapper_names) {
  std::vector<OutTensor> out;
  std::set<std::string> names;
  auto add = [&](const std::string& name, const std::string& clean,
                 const std::vector<int64_t>& shape, ckpt::DType d, int param) {
    const std::string& key = keep_wrapper_names || clean.empty() ? name : clean;
    ZERO_CHECK(names.insert(key).second, CheckpointError, "checkpoint: manifest: the name '",
               shown(key), "' is both a parameter and a buffer (or appears twice)");
    OutTensor t{name, key, shape, d, 1, 0, param};
    for (int64_t s : shape) t.numel *= s;
    t.bytes = t.numel * ckpt::dtype_bytes(d);
    out.push_back(std::move(t));
  };
  for (size_t i = 0; i < m.params.size(); ++i)
    add(m.params[i].name, m.params[i].clean_name, m.params[i].shape, dtype, static_cast<int>(i));
  for (const ckpt::ManifestBuffer& b : m.buffers) {
    const std::optional<ckpt::DType> d = ckpt::parse_dtype(b.dtype);
    ZERO_CHECK(d, CheckpointError, "checkpoint: manifest: buffer '", shown(b.name),
               "' has unknown dtype '", shown(b.dtype), "'");
    add(b.name, b.clean_name, b.shape, *d, -1);
  }
  return out;
}

// One output tensor, read and cast: a parameter's masters over its full range, or a buffer.
at::Tensor load_tensor(ckpt::CheckpointReader& reader, const OutTensor& t) {
  if (t.param < 0) {
    at::Tensor b = at::empty(t.shape, at::TensorOptions().dtype(scalar_type(t.dtype)));
    reader.read_tensor(0, ckpt::buffer_tensor_name(t.name), t.dtype, t.bytes, b.data_ptr());
    return b;
  }
  at::Tensor master = at::empty({t.numel}, at::kFloat);
  reader.read_state("master", t.param, 0, t.numel, master.data_ptr<float>());
  return master.to(scalar_type(t.dtype)).view(t.shape);
}

// Hugging Face's split: tensors in order, a new shard when the next one would overflow the
// current (a tensor larger than the limit gets a shard of its own). Ranges of `tensors`.
std::vector<std::pair<size_t, size_t>> plan_shards(const std::vector<OutTensor>& tensors,
                                                   int64_t max_shard_bytes) {
  std::vector<std::pair<size_t, size_t>> shards;
  int64_t size = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (shards.empty() || (size > 0 && size + tensors[i].bytes > max_shard_bytes)) {
      shards.push_back({i, i});
      size = 0;
    }
    shards.back().second = i + 1;
    size += tensors[i].bytes;
  }
  return shards;
}

// Writes tensors [begin, end) as one safetensors file at `path`, through a temporary name.
void write_shard(ckpt::CheckpointReader& reader, const std::vector<OutTensor>& tensors,
                 size_t begin, size_t end, const std::string& path, Progress& progress) {
  std::vector<at::Tensor> data;
  std::vector<ckpt::TensorToWrite> to_write;
  for (size_t i = begin; i < end; ++i) {
    data.push_back(load_tensor(reader, tensors[i]).contiguous());
    to_write.push_back(
        {tensors[i].out_name, tensors[i].dtype, tensors[i].shape, data.back().data_ptr()});
    progress.advance(tensors[i].bytes);
  }
  const std::string temp = path + ".tmp-" + ckpt::unique_nonce();
  ckpt::write_safetensors(temp, to_write, {{"format", "pt"}});
  ckpt::rename_into_place(temp, path);
}

// "dir/model.safetensors" -> "dir/model" (the stem of the shard names).
std::string strip_extension(const std::string& path) {
  const size_t slash = path.rfind('/');
  const size_t dot = path.rfind('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash) ||
      dot == (slash == std::string::npos ? 0 : slash + 1))
    return path;
  return path.substr(0, dot);
}

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string parent_dir(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// Returns the files written (OUT, or the shards and the index).
std::vector<std::string> write_safetensors_export(ckpt::CheckpointReader& reader,
                                                  const std::vector<OutTensor>& tensors,
                                                  int64_t total_bytes, const ExportOptions& o,
                                                  Progress& progress) {
  if (total_bytes <= o.max_shard_bytes) {
    write_shard(reader, tensors, 0, tensors.size(), o.out, progress);
    return {o.out};
  }
  const auto shards = plan_shards(tensors, o.max_shard_bytes);
  const std::string stem = strip_extension(o.out);
  nlohmann::json weight_map = nlohmann::json::object();
  std::vector<std::string> written;
  for (size_t s = 0; s < shards.size(); ++s) {
    char suffix[48];
    std::snprintf(suffix, sizeof suffix, "-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string path = stem + suffix;
    write_shard(reader, tensors, shards[s].first, shards[s].second, path, progress);
    for (size_t i = shards[s].first; i < shards[s].second; ++i)
      weight_map[tensors[i].out_name] = base_name(path);
    written.push_back(path);
  }
  const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}},
                                {"weight_map", weight_map}};
  const std::string index_path = o.out + ".index.json";
  ckpt::atomic_write_file(index_path, index.dump(2) + "\n");
  written.push_back(index_path);
  // An unsharded OUT from an earlier export would shadow the index: loaders prefer it.
  std::error_code ignored;
  std::filesystem::remove(o.out, ignored);
  return written;
}

void write_torch_export(ckpt::CheckpointReader& reader, const std::vector<OutTensor>& tensors,
                        const ExportOptions& o, Progress& progress) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const OutTensor& t : tensors) {
    dict.insert(t.out_name, load_tensor(reader, t).contiguous());
    progress.advance(t.bytes);
  }
  std::vector<char> bytes = torch::pickle_save(c10::IValue(std::move(dict)));
  ckpt::atomic_write_file(o.out, std::string_view(bytes.data(), bytes.size()));
}

ExportOptions parse_options(const FlagArgs& a) {
  ExportOptions o;
  o.out = a.positional[1];
  o.keep_wrapper_names = a.has("--keep-wrapper-names");
  const std::string dtype = a.value("--dtype", "fp32");
  if (dtype == "fp32")
    o.dtype = ckpt::DType::kF32;
  else if (dtype == "bf16")
    o.dtype = ckpt::DType::kBF16;
  else if (dtype == "fp16")
    o.dtype = ckpt::DType::kF16;
  else
    throw UsageError("--dtype: '" + dtype + "' is not fp32, bf16 or fp16");
  const std::string format = a.value("--format", "safetensors");
  ZERO_CHECK(format == "safetensors" || format == "torch", UsageError, "--format: '", format,
             "' is not safetensors or torch");
  o.torch_format = format == "torch";
  if (a.values.count("--max-shard-size"))
    o.max_shard_bytes = parse_byte_size("--max-shard-size", a.value("--max-shard-size"));
  ZERO_CHECK(!o.out.empty() && o.out.back() != '/' && !std::filesystem::is_directory(o.out),
             UsageError, "OUT '", o.out, "' must be a file path (e.g. out/model.safetensors)");
  return o;
}

int run_export(const std::vector<std::string>& args) {
  if (wants_help(args)) {
    std::cout << kExportUsage << "\n";
    return kCkptOk;
  }
  try {
    const FlagArgs a = parse_flag_args(args, {"--tag", "--dtype", "--format", "--max-shard-size"},
                                       {"--keep-wrapper-names"});
    ZERO_CHECK(a.positional.size() == 2, UsageError, "expected DIR and OUT, got ",
               a.positional.size(), " arguments (see zero checkpoint export --help)");
    const ExportOptions o = parse_options(a);
    ckpt::CheckpointReader reader(find_checkpoint_dir(a.positional[0], a.value("--tag")));
    const std::vector<OutTensor> tensors =
        plan_tensors(reader.manifest(), o.dtype, o.keep_wrapper_names);
    int64_t total = 0;
    for (const OutTensor& t : tensors) total += t.bytes;
    ZERO_CHECK(!o.torch_format || total <= o.max_shard_bytes, UsageError,
               "--format torch writes one file, but the weights (", grouped(total),
               " bytes) exceed --max-shard-size (", grouped(o.max_shard_bytes),
               " bytes); use --format safetensors to shard them, or a larger --max-shard-size");
    ckpt::make_dirs(parent_dir(o.out));

    Progress progress("export", total);
    std::vector<std::string> written{o.out};
    if (o.torch_format)
      write_torch_export(reader, tensors, o, progress);
    else
      written = write_safetensors_export(reader, tensors, total, o, progress);
    progress.finish();
    const std::string where = written.size() == 1
                                  ? o.out
                                  : detail::str(written.size() - 1, " shards and ", written.back());
    std::printf("exported %zu tensors, %s, to %s in %.1f s (%s)\n", tensors.size(),
                size_text(total).c_str(), where.c_str(), progress.seconds(),
                rate_text(total, progress.seconds()).c_str());
    return kCkptOk;
  } catch (const std::exception& e) {
    std::cerr << "zero checkpoint export: error: " << e.what() << "\n";
    return kCkptFail;
  }
}

}  // namespace

ZERO_COMMAND("checkpoint export",
             "consolidated weights of a checkpoint (zero_to_fp32): DIR OUT [--tag T] "
             "[--dtype fp32|bf16|fp16] [--format safetensors|torch] [--max-shard-size 5GB] "
             "[--keep-wrapper-names]",
             run_export);

}  // namespace zero::tools
