// Engine::save_checkpoint and save_16bit_model: every rank writes its layout shard of the fp32
// masters and optimizer states into a temporary directory; once all files are fsynced the
// writer rank adds the manifest, renames the directory into place and then replaces `latest`.
#include "save_load/io.h"
#include "save_load/state.h"

#include <zero/checkpoint/atomic_files.h>
#include <zero/checkpoint/progress.h>
#include <zero/checkpoint/safetensors.h>
#include <zero/comm/process_group.h>
#include <zero/engine/clean_names.h>
#include <zero/engine/pipe/module.h>
#include <zero/tp/random.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <spdlog/spdlog.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <cstdio>
#include <map>
#include <random>
#include <set>

namespace zero {

using detail::StatePiece;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

namespace {

std::string rank_file_name(int rank) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "rank%05d.safetensors", rank);
  return buf;
}

// The writer of shared files: global rank 0, or each node's local rank 0 with node-local storage.
bool is_dir_writer(const Engine::Impl& s) {
  if (!s.config.checkpoint.use_node_local_storage) return s.comm->rank() == 0;
  return detect_rank_env().local_rank == 0;
}

// Whose file carries the model's buffers: rank 0's (of each pipeline stage: its data and tensor
// rank 0's), or every rank's with node-local storage (no node then needs another's file).
bool writes_buffers(const Engine::Impl& s) {
  if (s.config.checkpoint.use_node_local_storage) return true;
  return s.pipeline ? s.data->rank() == 0 && s.tensor_rank == 0 : s.comm->rank() == 0;
}

// checkpoint.tag_validation: the tag must be the same on every rank (Ignore / Warn / Fail).
void validate_tag(const Engine::Impl& s, const std::string& tag, at::Device device) {
  const std::string& mode = s.config.checkpoint.tag_validation;
  if (mode == "Ignore" || s.comm->world_size() == 1) return;
  const auto hashes =
      detail::all_gather_values(*s.comm, {static_cast<int64_t>(detail::fnv1a(tag))}, device);
  for (int r = 0; r < s.comm->world_size(); ++r) {
    if (hashes[r] == hashes[0]) continue;
    const std::string msg = detail::str("save_checkpoint: checkpoint tag '", tag, "' of rank ",
                                        s.comm->rank(), " differs from rank 0's (rank ", r,
                                        " differs); every rank must pass the same tag");
    if (mode == "Fail") throw CheckpointError(msg + " (checkpoint.tag_validation: Fail)");
    if (s.comm->rank() == 0) spdlog::warn("[rank 0] {} (checkpoint.tag_validation: Warn)", msg);
    return;
  }
}

// This rank's file: the masters and optimizer states of its layout shard, its RNG state, and
// (rank 0, or every rank with node-local storage) the model's buffers and frozen parameters.
ckpt::FileDigest write_rank_file(const Engine::Impl& s, const std::string& path,
                                 const NamedTensors& buffers, std::vector<at::Tensor>& keep_alive) {
  const std::vector<OptimizerShard> shards = s.optimizer_shards();
  const std::vector<std::string> kinds = s.optimizer->state_kinds();
  // Host copies of each shard's states: [master, states...].
  std::vector<std::vector<at::Tensor>> host(shards.size());
  for (size_t g = 0; g < shards.size(); ++g) {
    host[g].push_back(shards[g].master.to(at::kCPU).contiguous());
    for (const at::Tensor& t : s.optimizer->state(g))
      host[g].push_back(t.to(at::kCPU).contiguous());
    for (const at::Tensor& t : host[g]) keep_alive.push_back(t);
  }
  std::vector<ckpt::TensorToWrite> tensors;
  for (const StatePiece& p : detail::saved_pieces(s, s.data->rank(), s.tensor_rank)) {
    const int64_t n = p.param_end - p.param_begin;
    for (size_t k = 0; k <= kinds.size(); ++k) {
      const std::string& kind = k == 0 ? std::string("master") : kinds[k - 1];
      const float* base = host[p.shard][k].data_ptr<float>() + p.state_offset;
      tensors.push_back({ckpt::piece_tensor_name(kind, s.names[p.param], p.param_begin),
                         ckpt::DType::kF32,
                         {n},
                         base});
    }
  }
  // With node-local storage every rank's file carries the buffers: no node needs another's file.
  if (writes_buffers(s)) {
    for (const auto& [name, t] : buffers) {
      at::Tensor h = t.detach().to(at::kCPU).contiguous();
      keep_alive.push_back(h);
      tensors.push_back({ckpt::buffer_tensor_name(name),
                         *ckpt::parse_dtype(detail::safetensors_dtype(h.scalar_type())),
                         std::vector<int64_t>(h.sizes().begin(), h.sizes().end()), h.data_ptr()});
    }
  }
  for (auto& [name, gen] : detail::rng_generators(s.params[0].device())) {
    at::Tensor rng;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rng = gen.get_state();  // a CPU byte tensor, for CUDA generators too
    }
    keep_alive.push_back(rng);
    tensors.push_back({name, ckpt::DType::kU8, {rng.numel()}, rng.data_ptr()});
  }
  const tp::RngTracker::State tracker = tp::rng_tracker().state();
  if (tracker.seed) {
    at::Tensor seed = at::full({1}, static_cast<int64_t>(*tracker.seed), at::kLong);
    keep_alive.push_back(seed);
    tensors.push_back(
        {std::string(ckpt::kTpRngPrefix) + "seed", ckpt::DType::kI64, {1}, seed.data_ptr()});
    for (const auto& [device, state] : tracker.states) {
      const at::Tensor bytes = state.contiguous();
      keep_alive.push_back(bytes);
      tensors.push_back(
          {ckpt::kTpRngPrefix + device, ckpt::DType::kU8, {bytes.numel()}, bytes.data_ptr()});
    }
  }
  int64_t total = 0;
  for (const auto& t : tensors) {
    int64_t n = ckpt::dtype_bytes(t.dtype);
    for (int64_t d : t.shape) n *= d;
    total += n;
  }
  // Rank 0's own file stands for the whole save on its terminal.
  std::optional<ckpt::Progress> progress;
  if (s.comm->rank() == 0) progress.emplace("save rank 0", total);
  return ckpt::write_safetensors(path, tensors, {{"format", "zero-checkpoint"}}, [&](int64_t n) {
    if (progress) progress->advance(n);
  });
}

ckpt::ManifestParam manifest_param(const Engine::Impl& s, int i, const CleanNames& clean) {
  ckpt::ManifestParam mp{s.names[i], detail::whole_shape(s, i),
                         detail::safetensors_dtype(s.params[i].scalar_type()), clean(s.names[i])};
  if (const detail::SplitLayout* split = detail::split_of(s, i)) {
    mp.split_dim = split->dim;
    mp.split_stride = split->stride;
  }
  return mp;
}

// A pipeline rank's part of the manifest: its stage's parameters (tied copies are their first
// stage's), its file's pieces by parameter name, and the buffers its file carries.
std::string pipeline_part(const Engine::Impl& s, const NamedTensors& buffers) {
  const CleanNames clean(*s.model);
  const FlatLayout& layout = s.stage->layout();
  nlohmann::json j;
  j["params"] = nlohmann::json::array();
  for (size_t i = 0; i < s.params.size(); ++i) {
    if (layout.groups()[layout.slots()[i].group].tied_copy) continue;
    const ckpt::ManifestParam mp = manifest_param(s, static_cast<int>(i), clean);
    j["params"].push_back(
        {mp.name, mp.shape, mp.dtype, mp.clean_name, mp.split_dim, mp.split_stride});
  }
  j["pieces"] = nlohmann::json::array();
  for (const StatePiece& p : detail::saved_pieces(s, s.data->rank(), s.tensor_rank))
    j["pieces"].push_back({s.names[p.param], p.param_begin, p.param_end});
  j["buffers"] = nlohmann::json::array();
  if (writes_buffers(s))
    for (const auto& [name, t] : buffers)
      j["buffers"].push_back({name, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                              detail::safetensors_dtype(t.scalar_type()), clean(name)});
  return j.dump();
}

// Every stage's parameters once (in layer order), buffers once, and each file's pieces.
void merge_pipeline_parts(ckpt::Manifest& m, const std::vector<std::string>& parts) {
  std::vector<nlohmann::json> js;
  for (const std::string& text : parts) js.push_back(nlohmann::json::parse(text));
  std::map<std::string, int> index;
  for (const nlohmann::json& j : js)
    for (const auto& p : j["params"]) {
      const std::string name = p[0].get<std::string>();
      if (index.count(name)) continue;
      index[name] = -1;
      m.params.push_back({name, p[1].get<std::vector<int64_t>>(), p[2].get<std::string>(),
                          p[3].get<std::string>(), p[4].get<int64_t>(), p[5].get<int64_t>()});
    }
  std::stable_sort(m.params.begin(), m.params.end(),
                   [](const ckpt::ManifestParam& a, const ckpt::ManifestParam& b) {
                     return pipe::layer_index(a.name) < pipe::layer_index(b.name);
                   });
  for (size_t k = 0; k < m.params.size(); ++k) index[m.params[k].name] = static_cast<int>(k);
  std::set<std::string> buffers;
  for (size_t r = 0; r < js.size(); ++r) {
    for (const auto& p : js[r]["pieces"])
      m.files[r].pieces.push_back(
          {index.at(p[0].get<std::string>()), p[1].get<int64_t>(), p[2].get<int64_t>()});
    for (const auto& b : js[r]["buffers"])
      if (buffers.insert(b[0].get<std::string>()).second)
        m.buffers.push_back({b[0].get<std::string>(), b[1].get<std::vector<int64_t>>(),
                             b[2].get<std::string>(), b[3].get<std::string>()});
  }
}

ckpt::Manifest build_manifest(const Engine::Impl& s, const std::string& tag,
                              const NamedTensors& buffers, const nlohmann::json& client_state,
                              const std::vector<int64_t>& digests,
                              const std::vector<std::string>& pipeline_parts) {
  ckpt::Manifest m;
  m.tag = tag;
  m.world_size = s.comm->world_size();
  m.tensor_parallel_size = s.tensor_size;
  m.pipeline_parallel_size = s.pipeline_size;
  // Version 1 readers keep reading what needs no version 2 key.
  m.format_version = s.tensor_size > 1 || s.pipeline_size > 1 ? 2 : 1;
  const int data_size = s.data->world_size();
  m.stage = s.stage->stage();
  m.precision = detail::precision_name(s.compute_dtype);
  m.optimizer = s.config.optimizer.type;
  m.state_kinds.push_back("master");
  for (const auto& k : s.optimizer->state_kinds()) m.state_kinds.push_back(k);
  m.config_hash = detail::config_hash(s.config);
  m.global_steps = s.global_steps;
  m.micro_steps = s.micro_steps;
  m.skipped_steps = s.skipped_steps;
  m.optimizer_steps = s.optimizer_steps;
  m.scheduler_steps = s.scheduler_steps;
  if (s.scaler) {
    const LossScaler::State st = s.scaler->state();
    m.loss_scaler = ckpt::LossScalerState{st.scale, st.hysteresis_left, st.iteration,
                                          st.last_overflow_iteration};
  }
  m.client_state = client_state;
  if (s.sampler) m.data_sampler = s.sampler->state();
  const CleanNames clean(*s.model);
  if (!s.pipeline) {
    for (size_t i = 0; i < s.params.size(); ++i)
      m.params.push_back(manifest_param(s, static_cast<int>(i), clean));
    for (const auto& [name, t] : buffers)
      m.buffers.push_back({name, std::vector<int64_t>(t.sizes().begin(), t.sizes().end()),
                           detail::safetensors_dtype(t.scalar_type()), clean(name)});
  }
  for (int r = 0; r < m.world_size; ++r) {
    ckpt::ManifestFile f;
    f.name = rank_file_name(r);
    f.rank = r;
    f.bytes = digests[3 * r + 1];
    f.crc32c = static_cast<uint32_t>(digests[3 * r + 2]);
    // The grid's rank order (ParallelGrid): tensor fastest, then data.
    const int tensor_rank = r % s.tensor_size, data_rank = r / s.tensor_size % data_size;
    f.tensor_rank = tensor_rank;
    if (!s.pipeline)
      for (const StatePiece& p : detail::saved_pieces(s, data_rank, tensor_rank))
        f.pieces.push_back({p.param, p.param_begin, p.param_end});
    m.files.push_back(std::move(f));
  }
  if (s.pipeline) merge_pipeline_parts(m, pipeline_parts);  // each stage knows its own layers
  return m;
}

}  // namespace

std::string Engine::save_checkpoint(const std::string& save_dir, const std::string& tag_in,
                                    const nlohmann::json& client_state) {
  Impl& s = *impl_;
  const int rank = s.comm->rank();
  ZERO_CHECK(!s.backward_since_step && s.micro_steps % s.config.gradient_accumulation_steps == 0,
             UsageError,
             "save_checkpoint: call it on a gradient accumulation boundary (after the "
             "step() that ends one); rank ",
             rank, " is at micro-step ", s.micro_steps, " with gradient_accumulation_steps ",
             s.config.gradient_accumulation_steps);
  ZERO_CHECK(client_state.is_object(), UsageError,
             "save_checkpoint: client_state must be a JSON object");
  if (s.sampler) (void)s.sampler->state();  // between its steps (UsageError before any write)
  const std::string tag = tag_in.empty() ? detail::str("global_step", s.global_steps) : tag_in;
  ZERO_CHECK(ckpt::is_safe_component(tag), UsageError, "save_checkpoint: tag '", tag,
             "' must be a plain directory name (no '/', no '..')");
  const at::Device device = s.params[0].device();
  const auto started = std::chrono::steady_clock::now();
  validate_tag(s, tag, device);

  // One temporary directory name for all ranks: rank 0's random nonce.
  std::random_device rd;
  const int64_t mine = (static_cast<int64_t>(rd()) << 31) ^ rd();
  const int64_t nonce_value = detail::broadcast_value(*s.comm, mine, device);
  char nonce[24];
  std::snprintf(nonce, sizeof(nonce), "%016llx", static_cast<unsigned long long>(nonce_value));
  const std::string temp = save_dir + "/" + tag + ".tmp-" + nonce;
  const std::string final_dir = save_dir + "/" + tag;
  const bool writer = is_dir_writer(s);

  detail::agree(s, "creating " + temp, device, [&] {
    if (writer) {
      for (const std::string& old : ckpt::list_temp_dirs(save_dir)) {
        const std::string name = old.substr(old.find_last_of('/') + 1);
        if (name.rfind(tag + ".tmp-", 0) == 0) ckpt::remove_tree(old);  // a crashed save's
      }
      ckpt::make_temp_dir(save_dir, tag, nonce);
    }
  });

  // Every rank: a frozen tensor-parallel slice is gathered whole over the tensor group.
  const NamedTensors buffers = detail::whole_module_buffers(s);
  std::vector<int64_t> mine_digest{0, 0, 0};
  std::vector<at::Tensor> keep_alive;
  std::string write_error;
  try {
    const ckpt::FileDigest d =
        write_rank_file(s, temp + "/" + rank_file_name(rank), buffers, keep_alive);
    mine_digest = {1, d.bytes, d.crc32c};
  } catch (const Error& e) {
    write_error = e.what();
  }
  keep_alive.clear();
  const auto digests = detail::all_gather_values(*s.comm, mine_digest, device);
  std::vector<int> failed;
  for (int r = 0; r < s.comm->world_size(); ++r)
    if (digests[3 * r] != 1) failed.push_back(r);
  if (!failed.empty()) {
    if (writer) ckpt::remove_tree(temp);
    throw CheckpointError(detail::str(
        "save_checkpoint: ", failed.size(), " rank(s) could not write their file (first: rank ",
        failed[0], "); nothing was published, the previous checkpoint and ", save_dir,
        "/latest are intact", write_error.empty() ? "" : ". This rank: " + write_error));
  }

  // Pipelines: each stage's layers and pieces, known to that stage only.
  const std::vector<std::string> parts =
      s.pipeline ? detail::all_gather_text(*s.comm, pipeline_part(s, buffers), device)
                 : std::vector<std::string>{};
  detail::agree(s, "publishing " + final_dir, device, [&] {
    if (!writer) return;
    try {
      const ckpt::Manifest m = build_manifest(s, tag, buffers, client_state, digests, parts);
      ckpt::atomic_write_file(temp + "/" + ckpt::kManifestFile, ckpt::manifest_to_json(m).dump(1));
      ckpt::publish_dir(temp, final_dir);
      ckpt::atomic_write_file(save_dir + "/" + ckpt::kLatestFile, tag + "\n");
    } catch (...) {
      ckpt::remove_tree(temp);
      throw;
    }
  });

  if (rank == 0) {
    int64_t total = 0;
    for (int r = 0; r < s.comm->world_size(); ++r) total += digests[3 * r + 1];
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    spdlog::info("[rank 0] saved checkpoint {} ({:.1f} MiB in {} files, {:.2f} s, {:.0f} MiB/s)",
                 final_dir, total / 1048576.0, s.comm->world_size(), secs,
                 total / 1048576.0 / std::max(secs, 1e-9));
  }
  return final_dir;
}

bool Engine::save_16bit_model(const std::string& save_dir, const std::string& file_name) {
  Impl& s = *impl_;
  ZERO_CHECK(ckpt::is_safe_component(file_name), UsageError, "save_16bit_model: file name '",
             file_name, "' must be a plain file name");
  const ZeroOptimizationConfig& z = s.config.zero_optimization;
  if (z.stage == 3 && !z.stage3_gather_16bit_weights_on_model_save) {
    // DeepSpeed's save_16bit_model: without the gather the file would hold one rank's shards.
    if (s.comm->rank() == 0)
      spdlog::warn(
          "save_16bit_model: did not save {}/{} because "
          "zero_optimization.stage3_gather_16bit_weights_on_model_save is false",
          save_dir, file_name);
    return false;
  }
  const auto params = full_parameters();  // collective: stage 3 gathers; every stage's layers
  NamedTensors buffers = detail::whole_module_buffers(s);  // collective over tp
  if (s.pipeline) buffers = detail::pipeline_gather_stages(s, std::move(buffers));
  const at::Device device = s.params[0].device();
  detail::agree(s, "writing " + save_dir + "/" + file_name, device, [&] {
    if (s.comm->rank() != 0) return;
    std::vector<ckpt::TensorToWrite> tensors;
    std::vector<at::Tensor> host;
    std::vector<std::string> registered;
    for (const auto& [name, t] : params) {
      registered.push_back(name);
      host.push_back(t);
    }
    for (const auto& [name, t] : buffers) {
      registered.push_back(name);
      host.push_back(t);
    }
    // The model's own names (the wrappers' segments removed): DeepSpeed's file has no wrappers.
    // A pipeline's (layers.<i>.<name>, other stages' too) have none.
    const std::vector<std::string> names =
        s.pipeline ? registered : CleanNames(*s.model).all(registered);
    for (size_t i = 0; i < host.size(); ++i) {
      host[i] = host[i].detach().to(at::kCPU).contiguous();
      const at::Tensor& h = host[i];
      tensors.push_back({names[i], *ckpt::parse_dtype(detail::safetensors_dtype(h.scalar_type())),
                         std::vector<int64_t>(h.sizes().begin(), h.sizes().end()), h.data_ptr()});
    }
    ckpt::make_dirs(save_dir);
    const std::string temp = save_dir + "/" + file_name + ".tmp-" + ckpt::unique_nonce();
    ckpt::write_safetensors(temp, tensors, {{"format", "pt"}});
    ckpt::rename_into_place(temp, save_dir + "/" + file_name);
  });
  return true;
}

}  // namespace zero
