// Engine::load_checkpoint: matches the checkpoint's parameters to the model by name and shape,
// then each rank reads the element ranges its own optimizer shard holds (whatever world size
// and stage saved them) straight into its state tensors, refreshes its 16-bit copy, reads or
// publishes the full parameters and restores the counters, schedule, loss scaler and RNG.
#include "save_load/io.h"
#include "save_load/read.h"
#include "save_load/state.h"

#include <zero/checkpoint/progress.h>
#include <zero/checkpoint/reader.h>
#include <zero/comm/process_group.h>
#include <zero/text.h>
#include <zero/tp/layers.h>
#include <zero/tp/random.h>

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <set>
#include <sstream>

namespace zero {

using detail::shape_text;
using detail::StatePiece;

namespace {

// For each of the model's parameters, its index in the checkpoint; throws listing the first few
// mismatches (missing, extra, shape) in one message. `model_names`: every parameter name of the
// whole model (a pipeline stage holds only its own), for the check of extra ones.
std::vector<int> match_params(const Engine::Impl& s, const ckpt::Manifest& m,
                              const std::string& dir, bool strict,
                              const std::set<std::string>& model_names) {
  std::vector<std::string> problems;
  std::vector<int> index(s.params.size(), -1);
  std::vector<bool> used(m.params.size(), false);
  for (size_t i = 0; i < s.params.size(); ++i) {
    const int k = m.find_param(s.names[i]);
    if (k < 0) {
      problems.push_back("'" + s.names[i] + "' is not in the checkpoint");
      continue;
    }
    used[k] = true;
    const std::vector<int64_t> shape = detail::whole_shape(s, static_cast<int>(i));
    if (shape != m.params[k].shape) {
      problems.push_back("'" + s.names[i] + "' has shape " + shape_text(shape) +
                         " in the model but " + shape_text(m.params[k].shape) +
                         " in the checkpoint");
      continue;
    }
    index[i] = k;
  }
  if (strict)
    for (size_t k = 0; k < m.params.size(); ++k)
      if (!used[k] && !model_names.count(m.params[k].name))
        problems.push_back("'" + m.params[k].name + "' is not in the model");
  if (problems.empty()) return index;
  std::ostringstream msg;
  msg << "load_checkpoint: " << dir << " is not a checkpoint of this model: " << problems.size()
      << " mismatch(es): ";
  for (size_t i = 0; i < problems.size() && i < 5; ++i) msg << (i ? "; " : "") << problems[i];
  if (problems.size() > 5) msg << "; ...";
  if (!strict) msg << " (load_module_strict=false ignores only extra checkpoint parameters)";
  throw CheckpointError(msg.str());
}

// Whether this rank reads the full parameters from the files instead of the stage all-gathering
// them after the reads (stages 1-2). Reading wins when the parameters live on the CPU and every
// rank runs on this node: the other ranks' files then sit in this node's page cache moments
// after those ranks read them, and reading their masters again is one memory copy, where the
// all-gather over loopback Gloo costs two copies through TCP and the time of a collective after
// all reads. On a GPU (NCCL) or across nodes (where a node may hold only its ranks' files) the
// stage all-gathers. Every rank takes the same decision.
bool read_full_parameters(const Engine::Impl& s, at::Device device) {
  const int stage = s.stage->stage();
  const int world = s.comm->world_size();
  // With tensor parallelism the stage's all-gather over the data group fills the slices.
  if (world == 1 || (stage != 1 && stage != 2) || s.tensor_size > 1) return false;
  // One copy the ranks share (host_shared_params): each rank writes its shard, and publishing is
  // a barrier.
  if (s.stage->host_shared_params()) return false;
  bool one_node = false;
  try {
    const RankEnv env = detect_rank_env();
    one_node = env.world_size == world && env.local_world_size == world;
  } catch (const Error&) {
  }
  const bool mine = device.is_cpu() && one_node;
  const auto all = detail::all_gather_values(*s.comm, {mine ? 1 : 0}, device);
  return std::count(all.begin(), all.end(), 0) == 0;
}

// Elements [begin, end) of the model's parameter `param` (with tensor parallelism: of this
// rank's slice) from checkpoint parameter `k`, into `dst`: its own slice's pieces when the
// checkpoint was split the same way, else through the whole tensor's coordinates.
void read_param_range(const Engine::Impl& s, const ckpt::Manifest& m, detail::StateReader& into,
                      const std::string& kind, int param, int k, int64_t begin, int64_t end,
                      const at::Tensor& dst) {
  const detail::SplitLayout* split = detail::split_of(s, param);
  if (!split) return into.read(kind, k, begin, end, dst);  // its own coordinates are the whole's
  const ckpt::ManifestParam& saved = m.params[k];
  if (m.tensor_parallel_size == s.tensor_size && saved.split_dim == split->dim &&
      saved.split_stride == split->stride)
    return into.read(kind, k, begin, end, dst, s.tensor_rank);
  const ckpt::TensorSplit mine{detail::whole_shape(s, param), split->dim, split->stride,
                               s.tensor_size};
  for (const ckpt::TensorSplit::Run& r : mine.runs_of_slice(s.tensor_rank, begin, end))
    into.read(kind, k, r.whole_begin, r.whole_begin + r.length,
              dst.narrow(0, r.slice_begin - begin, r.length));
}

// zero::tp::rng_tracker()'s seed and its CPU and `device` states from rank `rank`'s file, when
// the saving run had seeded it.
void restore_tracker(ckpt::CheckpointReader& reader, int rank, const at::Device& device) {
  const std::string prefix = ckpt::kTpRngPrefix;
  if (!reader.find_tensor(rank, prefix + "seed")) return;
  int64_t seed = 0;
  reader.read_tensor(rank, prefix + "seed", ckpt::DType::kI64, sizeof seed, &seed);
  tp::RngTracker::State state;
  state.seed = static_cast<uint64_t>(seed);
  for (const std::string& key : {std::string("cpu"), device.str()}) {
    const ckpt::TensorInfo* t = reader.find_tensor(rank, prefix + key);
    if (!t || t->dtype != ckpt::DType::kU8 || state.states.count(key)) continue;
    at::Tensor bytes = at::empty({t->numel()}, at::TensorOptions().dtype(at::kByte));
    reader.read_tensor(rank, prefix + key, ckpt::DType::kU8, t->nbytes(), bytes.data_ptr());
    state.states[key] = bytes;
  }
  tp::rng_tracker().set_state(state);
}

// Saved by this job's world, grid and ZeRO stage.
bool same_grid(const Engine::Impl& s, const ckpt::Manifest& m) {
  return m.world_size == s.comm->world_size() && m.stage == s.stage->stage() &&
         m.tensor_parallel_size == s.tensor_size && m.pipeline_parallel_size == s.pipeline_size;
}

void load_buffers(Engine::Impl& s, ckpt::CheckpointReader& reader, bool strict) {
  const ckpt::Manifest& m = reader.manifest();
  at::NoGradGuard no_grad;
  for (const auto& [name, t] : detail::module_buffers(s)) {
    auto it =
        std::find_if(m.buffers.begin(), m.buffers.end(),
                     [&name = name](const ckpt::ManifestBuffer& b) { return b.name == name; });
    if (it == m.buffers.end()) {
      ZERO_CHECK(!strict, CheckpointError, "load_checkpoint: ", reader.dir(), ": buffer '", name,
                 "' of the model is not in the checkpoint (load_module_strict)");
      continue;
    }
    // A frozen tensor-parallel slice: the checkpoint holds the whole tensor.
    const auto split = s.split_dims.find(t.unsafeGetTensorImpl());
    const bool sliced = s.tensor_size > 1 && split != s.split_dims.end();
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    if (sliced) shape[split->second.dim] *= s.tensor_size;
    ZERO_CHECK(it->shape == shape, CheckpointError, "load_checkpoint: ", reader.dir(), ": buffer '",
               name, "' has shape ", shape_text(shape), sliced ? " (whole)" : "",
               " in the model but ", shape_text(it->shape), " in the checkpoint");
    at::Tensor host =
        at::empty(shape, at::TensorOptions().dtype(detail::scalar_type_of(it->dtype)));
    // This rank's own file has them when saved with node-local storage; else rank 0's does (a
    // pipeline stage's: its first rank's).
    const int own = s.comm->rank(), files = static_cast<int>(m.files.size());
    const std::string saved = ckpt::buffer_tensor_name(name);
    int from = own < files && reader.find_tensor(own, saved) ? own : -1;
    for (int r = 0; from < 0 && r < files; ++r)
      if (reader.find_tensor(r, saved)) from = r;
    ZERO_CHECK(from >= 0, CheckpointError, "load_checkpoint: ", reader.dir(), ": buffer '", name,
               "' is in the manifest but in no file");
    reader.read_tensor(from, ckpt::buffer_tensor_name(name), *ckpt::parse_dtype(it->dtype),
                       static_cast<int64_t>(host.nbytes()), host.data_ptr());
    at::Tensor target = t;
    target.copy_(sliced ? tp::slice_of_whole(host, split->second.dim, split->second.stride,
                                             s.tensor_rank, s.tensor_size)
                        : host);
  }
}

}  // namespace

std::optional<LoadedCheckpoint> Engine::load_checkpoint(const std::string& load_dir,
                                                        const std::string& tag,
                                                        const LoadOptions& options) {
  Impl& s = *impl_;
  const int rank = s.comm->rank();
  const at::Device device = s.params[0].device();
  const auto started = std::chrono::steady_clock::now();
  std::optional<std::string> dir;
  std::optional<ckpt::CheckpointReader> reader;
  // Every rank resolves and validates; a failure anywhere is an error everywhere.
  detail::agree(s, "opening " + load_dir, device, [&] {
    dir = ckpt::resolve_checkpoint_dir(load_dir, tag);
    if (dir) reader.emplace(*dir);
  });
  const auto found = detail::all_gather_values(*s.comm, {dir ? 1 : 0}, device);
  if (std::count(found.begin(), found.end(), 0) > 0) {
    ZERO_CHECK(std::count(found.begin(), found.end(), 1) == 0, CheckpointError,
               "load_checkpoint: ", load_dir, "/latest exists on some ranks only (",
               "checkpoint.use_node_local_storage needs the same checkpoint on every node)");
    if (rank == 0)
      spdlog::warn("[rank 0] load_checkpoint: no checkpoint in {} ({} missing); starting fresh",
                   load_dir, ckpt::kLatestFile);
    return std::nullopt;
  }
  const ckpt::Manifest& m = reader->manifest();
  const int stage = s.stage->stage();
  const bool module_only = options.load_module_only;
  const bool load_optimizer = options.load_optimizer_states && !module_only;

  detail::agree(s, "checking " + *dir, device, [&] {
    ZERO_CHECK(options.allow_reshard || same_grid(s, m), CheckpointError, "load_checkpoint: ", *dir,
               " was saved by ", m.world_size, " ranks (tensor parallelism ",
               m.tensor_parallel_size, ", ", m.pipeline_parallel_size,
               " pipeline stages) at ZeRO stage ", m.stage, "; this job has ", s.comm->world_size(),
               " ranks (tensor parallelism ", s.tensor_size, ", ", s.pipeline_size,
               " pipeline stages) at stage ", stage, " and allow_reshard is false");
    const std::vector<std::string> kinds = s.optimizer->state_kinds();
    if (load_optimizer)
      for (const auto& k : kinds)
        ZERO_CHECK(std::count(m.state_kinds.begin(), m.state_kinds.end(), k), CheckpointError,
                   "load_checkpoint: ", *dir, " was saved with optimizer ", m.optimizer,
                   ", which has no '", k, "' state for this job's ", s.config.optimizer.type,
                   "; load with load_optimizer_states=false to start its state fresh");
    if (options.verify_checksums)
      for (int r = rank; r < m.world_size; r += s.comm->world_size()) reader->verify({r});
  });

  std::set<std::string> model_names(s.names.begin(), s.names.end());
  if (s.pipeline) {  // every stage's
    std::string mine;
    for (const std::string& n : s.names) mine += n + "\n";
    for (const std::string& text : detail::all_gather_text(*s.comm, mine, device)) {
      std::istringstream lines(text);
      for (std::string n; std::getline(lines, n);) model_names.insert(n);
    }
  }
  std::vector<int> index;
  detail::agree(s, "matching " + *dir, device,
                [&] { index = match_params(s, m, *dir, options.load_module_strict, model_names); });

  // Masters (and optimizer states) of the ranges this rank's shards hold, read straight into
  // the state tensors; then, when that is cheaper than the stage's all-gather, the masters of
  // the rest of every parameter, straight into the full parameters.
  s.stage->release_all();
  const std::vector<OptimizerShard> shards = s.optimizer_shards();
  const std::vector<std::string> kinds = s.optimizer->state_kinds();
  const bool read_params = read_full_parameters(s, device);
  detail::agree(s, "reading " + *dir, device, [&] {
    detail::StateReader into(*reader);
    // The layout shards over the data group (MiCS: its shard group): this rank's place in it.
    const int shard_rank = s.shard_rank();
    const std::vector<StatePiece> pieces =
        detail::held_pieces(s.stage->layout(), stage, shard_rank);
    const std::vector<detail::ParamPart> rest =
        read_params ? detail::unheld_parts(s.stage->layout(), shard_rank)
                    : std::vector<detail::ParamPart>{};
    int64_t total = 0;
    for (const StatePiece& p : pieces)
      total += (p.param_end - p.param_begin) * 4 * (load_optimizer ? 1 + kinds.size() : 1);
    for (const detail::ParamPart& p : rest) total += p.elems.numel() * 4;
    std::optional<ckpt::Progress> progress;  // rank 0's reads stand for the load on its terminal
    if (rank == 0) progress.emplace("load rank 0", total);
    for (const StatePiece& p : pieces) {
      const int64_t n = p.param_end - p.param_begin;
      auto fill = [&](const std::string& kind, const at::Tensor& state) {
        read_param_range(s, m, into, kind, p.param, index[p.param], p.param_begin, p.param_end,
                         state.narrow(0, p.state_offset, n));
        if (progress) progress->advance(n * 4);
      };
      fill("master", shards[p.shard].master);
      if (load_optimizer) {
        const std::vector<at::Tensor> states = s.optimizer->state(p.shard);
        for (size_t k = 0; k < kinds.size(); ++k) fill(kinds[k], states[k]);
      }
    }
    for (const detail::ParamPart& p : rest) {
      const at::Tensor flat = s.params[p.param].detach().view({-1});
      read_param_range(s, m, into, "master", p.param, index[p.param], p.elems.begin, p.elems.end,
                       flat.narrow(0, p.elems.begin, p.elems.numel()));
      if (progress) progress->advance(p.elems.numel() * 4);
    }
    load_buffers(s, *reader, options.load_module_strict);
  });
  if (!load_optimizer)  // fresh moments for the loaded masters
    for (size_t g = 0; g < shards.size(); ++g)
      for (const at::Tensor& t : s.optimizer->state(g)) t.zero_();
  {
    at::NoGradGuard no_grad;
    // load_from_fp32_weights false: DeepSpeed rebuilds the masters from the 16-bit weights
    // (_restore_from_bit16_weights), which are the saved masters rounded to the 16-bit type.
    if (!s.config.zero_optimization.load_from_fp32_weights && s.compute_dtype != at::kFloat)
      for (const OptimizerShard& sh : shards)
        if (sh.master.defined()) sh.master.copy_(sh.master.to(s.compute_dtype));
    for (const OptimizerShard& sh : shards)
      if (sh.param16.defined()) sh.param16.copy_(sh.master);
    s.optimizer->masters_changed();  // offload: the parameters from the host masters; NVMe: stored
  }
  if (!read_params) s.stage->publish_parameters();
  s.stage->zero_grad();

  if (!module_only) {
    s.global_steps = m.global_steps;
    // Saved on a boundary of its accumulation; another one (an elastic restart) counts the
    // micro-steps as if it had always run, so that the next micro-step starts a step.
    const int64_t gas = s.config.gradient_accumulation_steps;
    s.micro_steps = m.micro_steps % gas == 0 ? m.micro_steps : m.global_steps * gas;
    s.skipped_steps = m.skipped_steps;
    if (load_optimizer) s.optimizer_steps = m.optimizer_steps;
    if (options.load_lr_scheduler_states) s.scheduler_steps = m.scheduler_steps;
    if (s.scaler && m.loss_scaler) {
      const ckpt::LossScalerState& l = *m.loss_scaler;
      s.scaler->restore({l.scale, l.hysteresis_left, l.iteration, l.last_overflow_iteration});
    }
    // Each rank continues its own random stream when the world size (and pipeline) is unchanged.
    if (rank < m.world_size && m.pipeline_parallel_size == s.pipeline_size) {
      for (auto& [name, gen] : detail::rng_generators(device)) {
        const ckpt::TensorInfo* t = reader->find_tensor(rank, name);
        if (!t || t->dtype != ckpt::DType::kU8) continue;  // saved on another kind of device
        at::Tensor state = at::empty({t->numel()}, at::TensorOptions().dtype(at::kByte));
        reader->read_tensor(rank, name, ckpt::DType::kU8, t->nbytes(), state.data_ptr());
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(state);
      }
      // The tensor-parallel tracker's streams, when the grid is the same.
      if (m.tensor_parallel_size == s.tensor_size && m.world_size == s.comm->world_size())
        restore_tracker(*reader, rank, device);
    }
  }
  // The program's data position: into its sampler, or kept for the one it makes next.
  if (!module_only && !m.data_sampler.is_null()) {
    if (s.sampler)
      s.sampler->load_state(m.data_sampler);
    else
      s.loaded_sampler_state = m.data_sampler;
  }
  // A reshard changes batch sizes and stage by design; otherwise a config change is worth a note.
  if (rank == 0 && same_grid(s, m) && m.config_hash != detail::config_hash(s.config))
    spdlog::warn(
        "[rank 0] load_checkpoint: {} was saved with a different ds_config (hash {} vs "
        "{}); continuing with this job's config",
        *dir, m.config_hash, detail::config_hash(s.config));
  const auto read = detail::all_gather_values(*s.comm, {reader->bytes_read()}, device);
  if (rank == 0) {
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    spdlog::info(
        "[rank 0] loaded checkpoint {} (saved by {} ranks at stage {} in {}; read {:.1f} MiB on "
        "this rank, {:.2f} s) at step {}",
        *dir, m.world_size, m.stage, m.precision, read[0] / 1048576.0, secs, s.global_steps);
  }
  return LoadedCheckpoint{*dir, m.client_state};
}

}  // namespace zero
