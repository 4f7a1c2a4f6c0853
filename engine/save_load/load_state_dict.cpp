// zero::load_state_dict: a weights file into a model by clean name; through the engine that
// trains the model when there is one (masters, stage 3 shards, offloaded states).
#include <zero/engine/load_state_dict.h>

#include "save_load/io.h"
#include "save_load/state.h"
#include "save_load/weights_file.h"

#include <zero/engine/clean_names.h>
#include <zero/text.h>
#include <zero/tp/layers.h>

#include <ATen/ATen.h>

#include <mutex>
#include <optional>
#include <sstream>
#include <unordered_map>
#include <unordered_set>

namespace zero {

namespace detail {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<const torch::nn::Module*, Engine::Impl*>& registry() {
  static std::unordered_map<const torch::nn::Module*, Engine::Impl*> r;
  return r;
}

}  // namespace

void register_engine_model(Engine::Impl* impl) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[impl->model.get()] = impl;
}

void unregister_engine_model(const Engine::Impl* impl) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(impl->model.get());
  if (it != registry().end() && it->second == impl) registry().erase(it);
}

Engine::Impl* engine_of(const torch::nn::Module& model) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto it = registry().find(&model);
  return it == registry().end() ? nullptr : it->second;
}

}  // namespace detail

namespace {

using detail::WeightsFile;

// A tensor that a zero::tp layer splits: this rank's slice of the file's whole tensor.
struct Split {
  int64_t dim = 0, stride = 1;
  int rank = 0, parts = 1;
};

// One tensor of the model to fill, and the file's entry for it.
struct Target {
  std::string name;   // registered
  std::string clean;  // as exports write it
  at::Tensor tensor;
  const WeightsFile::Entry* entry = nullptr;
  std::optional<Split> split;  // the file holds the whole tensor (exports and save_16bit_model)

  std::vector<int64_t> whole_shape() const {
    std::vector<int64_t> shape(tensor.sizes().begin(), tensor.sizes().end());
    if (split) shape[split->dim] *= split->parts;
    return shape;
  }
  // The file's tensor as this rank holds it.
  at::Tensor read(const WeightsFile& file) const {
    at::Tensor whole = file.read(entry->name);
    return split ? tp::slice_of_whole(whole, split->dim, split->stride, split->rank, split->parts)
                 : whole;
  }
};

// The tensors the model's zero::tp layers split over more than one rank.
std::unordered_map<const c10::TensorImpl*, Split> split_tensors(const torch::nn::Module& model) {
  std::unordered_map<const c10::TensorImpl*, Split> out;
  for (const auto& item : model.named_modules(/*name_prefix=*/"", /*include_self=*/true)) {
    const auto* layer = dynamic_cast<const tp::TensorParallelModule*>(item.value().get());
    if (!layer || !layer->tensor_group() || layer->tensor_group()->world_size() == 1) continue;
    const Communicator& group = *layer->tensor_group();
    for (const tp::SplitParameter& p : layer->split_parameters())
      if (p.tensor.defined())
        out[p.tensor.unsafeGetTensorImpl()] = {p.dim, p.stride, group.rank(), group.world_size()};
  }
  return out;
}

// The model's parameters and buffers (each tensor once: tied weights under their first name),
// matched to the file by clean or registered name; throws CheckpointError listing shape and
// dtype mismatches, and with `strict` missing and unexpected names.
std::vector<Target> match(const torch::nn::Module& model, const WeightsFile& file, bool strict,
                          LoadedStateDict* result) {
  std::vector<Target> targets;
  std::unordered_set<const c10::TensorImpl*> seen;
  auto add = [&](const std::string& name, const at::Tensor& t) {
    if (!t.defined() || !seen.insert(t.unsafeGetTensorImpl()).second) return;
    targets.push_back({name, "", t, nullptr, std::nullopt});
  };
  for (const auto& item : model.named_parameters(/*recurse=*/true)) add(item.key(), item.value());
  for (const auto& item : model.named_buffers(/*recurse=*/true)) add(item.key(), item.value());
  const auto splits = split_tensors(model);
  for (Target& t : targets)
    if (auto it = splits.find(t.tensor.unsafeGetTensorImpl()); it != splits.end())
      t.split = it->second;
  // Two tensors with one clean name would take one entry of the file: CleanNames refuses them.
  std::vector<std::string> registered;
  for (const Target& t : targets) registered.push_back(t.name);
  const std::vector<std::string> clean = CleanNames(model).all(registered);
  for (size_t i = 0; i < targets.size(); ++i) targets[i].clean = clean[i];

  std::vector<std::string> problems;
  std::unordered_set<std::string> used;
  for (Target& t : targets) {
    t.entry = file.find(t.clean);
    if (!t.entry) t.entry = file.find(t.name);
    if (!t.entry) {
      result->missing_keys.push_back(t.clean);
      continue;
    }
    used.insert(t.entry->name);
    const std::vector<int64_t> shape = t.whole_shape();
    if (shape != t.entry->shape)
      problems.push_back("'" + t.clean + "' has shape " + detail::shape_text(shape) +
                         (t.split ? " (whole; split over tensor-parallel ranks)" : "") +
                         " in the model but " + detail::shape_text(t.entry->shape) +
                         " in the file");
    else if (at::isFloatingType(t.tensor.scalar_type()) != at::isFloatingType(t.entry->dtype) ||
             (!at::isFloatingType(t.entry->dtype) && t.entry->dtype != t.tensor.scalar_type()))
      problems.push_back(detail::str("'", t.clean, "' is ", t.tensor.scalar_type(),
                                     " in the model but ", t.entry->dtype, " in the file"));
  }
  for (const WeightsFile::Entry& e : file.entries())
    if (!used.count(e.name)) result->unexpected_keys.push_back(e.name);
  auto list = [](const std::vector<std::string>& names) {
    std::string out;
    for (size_t i = 0; i < names.size() && i < 5; ++i) out += (i ? ", '" : "'") + names[i] + "'";
    return out + (names.size() > 5 ? ", ..." : "");
  };
  if (strict && !result->missing_keys.empty())
    problems.push_back(detail::str(result->missing_keys.size(), " of the model's names missing (",
                                   list(result->missing_keys), ")"));
  if (strict && !result->unexpected_keys.empty())
    problems.push_back(detail::str(result->unexpected_keys.size(), " names not in the model (",
                                   list(result->unexpected_keys), ")"));
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << "load_state_dict: " << file.path() << " does not fit the model: ";
    for (size_t i = 0; i < problems.size() && i < 6; ++i) msg << (i ? "; " : "") << problems[i];
    if (problems.size() > 6) msg << "; ...";
    if (strict && (!result->missing_keys.empty() || !result->unexpected_keys.empty()))
      msg << " (strict=false loads what matches and returns the rest)";
    throw CheckpointError(msg.str());
  }
  return targets;
}

void load_plain(std::vector<Target>& targets, const WeightsFile& file) {
  at::NoGradGuard no_grad;
  for (Target& t : targets)
    if (t.entry) t.tensor.copy_(t.read(file));
}

// Through the engine: each rank writes the elements its optimizer shards hold into the fp32
// masters, then the stage refreshes the 16-bit copies and the full parameters as after a step.
// The layout shards over the data group (with tensor parallelism, this rank's slices).
void load_through_engine(Engine::Impl& s, std::vector<Target>& targets, const WeightsFile& file) {
  std::unordered_map<const c10::TensorImpl*, const Target*> by_tensor;
  for (const Target& t : targets) by_tensor[t.tensor.unsafeGetTensorImpl()] = &t;
  at::NoGradGuard no_grad;
  s.stage->release_all();
  const std::vector<OptimizerShard> shards = s.optimizer_shards();
  int cached = -1;  // pieces come parameter by parameter: read each one once
  at::Tensor value;
  for (const detail::StatePiece& p :
       detail::held_pieces(s.stage->layout(), s.stage->stage(), s.shard_rank())) {
    const Target* t = by_tensor.at(s.params[p.param].unsafeGetTensorImpl());
    if (!t->entry) continue;  // missing (strict=false): keeps its value
    if (p.param != cached) {
      value = t->read(file).to(at::kFloat).reshape({-1});
      cached = p.param;
    }
    const int64_t n = p.param_end - p.param_begin;
    shards[p.shard].master.narrow(0, p.state_offset, n).copy_(value.narrow(0, p.param_begin, n));
  }
  for (const OptimizerShard& sh : shards)
    if (sh.param16.defined()) sh.param16.copy_(sh.master);
  s.optimizer->masters_changed();
  s.stage->publish_parameters();
  s.stage->zero_grad();
  // Buffers and frozen parameters are whole on every rank.
  std::unordered_set<const c10::TensorImpl*> trained;
  for (const at::Tensor& p : s.params) trained.insert(p.unsafeGetTensorImpl());
  for (Target& t : targets)
    if (t.entry && !trained.count(t.tensor.unsafeGetTensorImpl())) t.tensor.copy_(t.read(file));
}

}  // namespace

LoadedStateDict load_state_dict(torch::nn::Module& model, const std::string& file_path,
                                bool strict) {
  LoadedStateDict result;
  Engine::Impl* engine = detail::engine_of(model);
  if (!engine) {
    const WeightsFile file(file_path);
    std::vector<Target> targets = match(model, file, strict, &result);
    load_plain(targets, file);
    return result;
  }
  // Collective: a file that one rank cannot read, or that does not fit, fails on every rank.
  Engine::Impl& s = *engine;
  const at::Device device = s.params.front().device();
  std::optional<WeightsFile> file;
  std::vector<Target> targets;
  // A pipeline stage holds its own layers: the file's other layers are another stage's, and
  // only a name that no stage takes is unexpected.
  detail::agree(s, "load_state_dict " + file_path, device, [&] {
    file.emplace(file_path);
    targets = match(model, *file, strict && !s.pipeline, &result);
  });
  if (s.pipeline) {
    std::string taken;
    for (const Target& t : targets)
      if (t.entry) taken += t.entry->name + "\n";
    std::unordered_set<std::string> any_stage;
    for (const std::string& text : detail::all_gather_text(*s.comm, taken, device)) {
      std::istringstream lines(text);
      for (std::string n; std::getline(lines, n);) any_stage.insert(n);
    }
    result.unexpected_keys.clear();
    for (const WeightsFile::Entry& e : file->entries())
      if (!any_stage.count(e.name)) result.unexpected_keys.push_back(e.name);
    detail::agree(s, "load_state_dict " + file_path, device, [&] {
      ZERO_CHECK(
          !strict || (result.missing_keys.empty() && result.unexpected_keys.empty()),
          CheckpointError, "load_state_dict: ", file_path,
          " does not fit the pipeline: ", result.missing_keys.size(),
          " of this stage's names missing",
          result.missing_keys.empty() ? "" : " (first '" + result.missing_keys[0] + "')", ", ",
          result.unexpected_keys.size(), " names no stage holds",
          result.unexpected_keys.empty() ? "" : " (first '" + result.unexpected_keys[0] + "')",
          " (strict=false loads what matches and returns the rest)");
    });
  }
  load_through_engine(s, targets, *file);
  return result;
}

}  // namespace zero
