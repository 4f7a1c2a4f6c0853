// PipelineModule: the partition, the seeded build of this stage's layers, their forward.
#include <zero/engine/pipe/module.h>

#include <zero/engine/activation/checkpointed.h>
#include <zero/engine/init.h>
#include <zero/engine/pipe/partition.h>
#include <zero/error.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <limits>
#include <mutex>

namespace zero::pipe {
namespace {

// Runs its body under the caller's CPU RNG state, restored afterwards: building or running
// layers to measure them draws nothing the model's build would see.
class CpuRngKept {
 public:
  CpuRngKept() : gen_(at::detail::getDefaultCPUGenerator()) {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    saved_ = gen_.get_state();
  }
  ~CpuRngKept() {
    std::lock_guard<std::mutex> lock(gen_.mutex());
    gen_.set_state(saved_);
  }

 private:
  at::Generator gen_;
  at::Tensor saved_;
};

// Trainable parameters of each layer, each built once.
std::vector<int64_t> count_trainable(const std::vector<LayerSpec>& specs) {
  CpuRngKept kept;
  std::vector<int64_t> counts;
  for (const LayerSpec& s : specs) {
    int64_t n = 0;
    for (const at::Tensor& p : s.build().ptr()->parameters(/*recurse=*/true))
      if (p.requires_grad()) n += p.numel();
    counts.push_back(n);
  }
  return counts;
}

}  // namespace

PipelineModuleImpl::PipelineModuleImpl(const ParallelGrid& grid, std::vector<LayerSpec> layers,
                                       PipelineOptions options)
    : specs_(std::move(layers)),
      options_(std::move(options)),
      stage_(grid.pipeline_rank()),
      stages_(grid.pipeline_size()) {
  const int chunks = options_.virtual_stages();
  ZERO_CHECK(chunks >= 1, UsageError, "PipelineModule: ", chunks,
             " virtual stages; there must be at least 1");
  const int n = num_layers(), count = stages_ * chunks;
  ZERO_CHECK(n >= count, UsageError, "PipelineModule: ", n, " layers cannot fill ", stages_,
             " pipeline stages",
             chunks > 1 ? detail::str(" x ", chunks, " virtual stages = ", count, " parts")
                        : std::string(),
             " (each ", chunks > 1 ? "part" : "stage", " needs at least one layer)");
  std::vector<std::string> names;
  for (const LayerSpec& s : specs_) names.push_back(s.type_name);
  std::string method = options_.partition_method();
  std::transform(method.begin(), method.end(), method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool counts_needed = method == "parameters";
  std::vector<double> seconds;
  if (method == "profile") {
    ZERO_CHECK(options_.profile_input().defined(), UsageError,
               "PipelineModule: partition method 'profile' needs PipelineOptions::profile_input "
               "(a sample micro-batch's inputs, to time each layer on)");
    seconds = profile_layers(specs_, options_.profile_input(), options_.base_seed(), *grid.world());
  }
  parts_ = partition_layers(options_.partition_method(),
                            counts_needed ? count_trainable(specs_) : std::vector<int64_t>(n, 0),
                            names, count, seconds);
  chunks_.resize(chunks);  // partition_text names parts by it
  for (int k = 0; k < count; ++k)
    ZERO_CHECK(parts_[k + 1] > parts_[k], UsageError, "PipelineModule: partition method '",
               options_.partition_method(), "' leaves ",
               chunks > 1 ? detail::str("part ", k, " (pipeline stage ", k % stages_, ", chunk ",
                                        k / stages_, ")")
                          : detail::str("pipeline stage ", k),
               " without layers (", partition_text(), "); use another method or fewer stages");
  auto container = register_module("layers", std::make_shared<torch::nn::Module>());
  for (int c = 0; c < chunks; ++c) {
    const int part = c * stages_ + stage_;
    for (int i = parts_[part]; i < parts_[part + 1]; ++i) {
      const LayerSpec& spec = specs_[i];
      if (!spec.tie_key.empty() && tied_.count(spec.tie_key)) {  // built for an earlier use
        chunks_[c].push_back({i, tied_.at(spec.tie_key), spec.tied_forward, false});
        continue;
      }
      // A tied module is built as its key's first layer, wherever that is, and named after it.
      const int built_as = spec.tie_key.empty() ? i : first_of_key(spec.tie_key);
      torch::manual_seed(static_cast<uint64_t>(options_.base_seed() + built_as));
      torch::nn::AnyModule layer = specs_[built_as].build();
      container->register_module(std::to_string(built_as), layer.ptr());
      if (!spec.tie_key.empty()) tied_.emplace(spec.tie_key, layer);
      // Under zero::Init a layer keeps only this rank's shard from the moment it is built.
      if (const Init* init = Init::active(); init && spec.tie_key.empty())
        init_shards_[built_as] = init->partition(*layer.ptr());
      chunks_[c].push_back({i, std::move(layer), spec.tied_forward, true});
    }
  }
  if (grid.world()->rank() == 0)
    spdlog::info("[rank 0] pipeline partition ({}): {}", options_.partition_method(),
                 partition_text());
}

at::Tensor PipelineModuleImpl::forward(const at::Tensor& x, int chunk) {
  ZERO_CHECK(chunk >= 0 && chunk < virtual_stages(), UsageError, "PipelineModule: chunk ", chunk,
             " of a stage with ", virtual_stages(), " model chunks");
  const size_t n = chunks_[chunk].size();
  const size_t k = static_cast<size_t>(std::max(0, options_.activation_checkpoint_interval()));
  if (k == 0) return run_layers(chunk, 0, n, x);
  at::Tensor h = x;
  // The recompute runs in backward, after this forward returned: the function owns its range.
  for (size_t begin = 0; begin < n; begin += k) {
    const size_t end = std::min(n, begin + k);
    h = checkpoint([this, chunk, begin,
                    end](const at::Tensor& in) { return run_layers(chunk, begin, end, in); },
                   h, checkpointing_);
  }
  return h;
}

at::Tensor PipelineModuleImpl::run_layers(int chunk, size_t begin, size_t end,
                                          const at::Tensor& x) {
  at::Tensor h = x;
  for (size_t i = begin; i < end; ++i) {
    Owned& o = chunks_[chunk][i];
    try {
      h = o.forward ? o.forward(o.layer, h) : o.layer.forward<at::Tensor>(h);
    } catch (const c10::Error& e) {
      // AnyModule's "Attempted to cast ... to the requested type" means a non-tensor output.
      throw UsageError("PipelineModule: layer " + std::to_string(o.index) + " (" +
                       specs_[o.index].type_name + ") on pipeline stage " + std::to_string(stage_) +
                       " failed or did not return one tensor: " + e.what_without_backtrace());
    }
  }
  return h;
}

std::vector<std::pair<int, torch::nn::AnyModule>> PipelineModuleImpl::owned_layers() const {
  std::vector<std::pair<int, torch::nn::AnyModule>> out;
  for (const auto& chunk : chunks_)
    for (const Owned& o : chunk)
      if (o.first_use) out.emplace_back(o.index, o.layer);
  return out;
}

std::vector<std::vector<at::Tensor>> PipelineModuleImpl::take_init_shards() {
  std::vector<std::vector<at::Tensor>> out;
  for (const auto& [index, layer] : owned_layers()) {
    auto it = init_shards_.find(index);
    out.push_back(it == init_shards_.end() ? std::vector<at::Tensor>() : std::move(it->second));
  }
  init_shards_.clear();
  return out;
}

int PipelineModuleImpl::first_of_key(const std::string& key) const {
  for (size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].tie_key == key) return static_cast<int>(i);
  throw InternalError("no layer of tie key " + key);
}

std::vector<PipelineModuleImpl::Tie> PipelineModuleImpl::ties() const {
  std::map<std::string, std::vector<int>> stages;  // by key: the stages holding it, in order
  for (size_t k = 0; k + 1 < parts_.size(); ++k)
    for (int i = parts_[k]; i < parts_[k + 1]; ++i) {
      const std::string& key = specs_[i].tie_key;
      const int s = static_cast<int>(k) % stages_;
      if (key.empty()) continue;
      std::vector<int>& list = stages[key];
      if (std::find(list.begin(), list.end(), s) == list.end()) list.push_back(s);
    }
  std::vector<Tie> out;
  for (auto& [key, list] : stages) {
    if (list.size() < 2) continue;
    std::sort(list.begin(), list.end());
    auto it = tied_.find(key);
    out.push_back({key, list, it == tied_.end() ? torch::nn::AnyModule() : it->second});
  }
  return out;
}

std::vector<double> profile_layers(const std::vector<LayerSpec>& specs, const at::Tensor& sample,
                                   int64_t base_seed, Communicator& world) {
  const int n = static_cast<int>(specs.size());
  at::Tensor seconds = at::zeros({n}, at::kFloat);
  if (world.rank() == 0) {
    CpuRngKept kept;
    const at::Device device = sample.device();
    auto sync = [&] {
      if (device.is_cuda()) torch::cuda::synchronize(device.index());
    };
    at::Tensor h = sample;
    for (int i = 0; i < n; ++i) {
      const LayerSpec& spec = specs[i];
      int built_as = i;  // a tied use runs a module built as its key's first layer
      for (int k = 0; k < i && built_as == i && !spec.tie_key.empty(); ++k)
        if (specs[k].tie_key == spec.tie_key) built_as = k;
      torch::manual_seed(static_cast<uint64_t>(base_seed + built_as));
      torch::nn::AnyModule layer = specs[built_as].build();
      layer.ptr()->to(device);
      double best = std::numeric_limits<double>::infinity();
      at::Tensor out;
      for (int run = 0; run < 3; ++run) {  // the best of three: the first pays for allocations
        at::Tensor x = h.detach();
        if (at::isFloatingType(x.scalar_type())) x.requires_grad_(true);
        sync();
        const auto start = std::chrono::steady_clock::now();
        try {
          out = spec.tied_forward ? spec.tied_forward(layer, x) : layer.forward<at::Tensor>(x);
        } catch (const c10::Error& e) {
          throw UsageError(
              "PipelineModule: profiling layer " + std::to_string(i) + " (" + spec.type_name +
              ") failed or it did not return one tensor: " + e.what_without_backtrace());
        }
        if (out.requires_grad()) out.backward(at::ones_like(out));
        sync();
        best = std::min(
            best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      seconds[i] = best;
      h = out.detach();
    }
  }
  at::Tensor sent = world.backend() == Backend::kNccl ? seconds.to(at::kCUDA) : seconds;
  world.broadcast(sent, 0)->wait();
  seconds = sent.cpu();
  return std::vector<double>(seconds.data_ptr<float>(), seconds.data_ptr<float>() + n);
}

int layer_index(const std::string& name) {
  const size_t begin = name.find('.') + 1, end = name.find('.', begin);
  ZERO_CHECK(name.rfind("layers.", 0) == 0 && end != std::string::npos && end > begin, UsageError,
             "'", name, "' is not a pipeline parameter name (layers.<i>.<name>)");
  return std::stoi(name.substr(begin, end - begin));
}

std::string PipelineModuleImpl::partition_text() const {
  std::string out;
  const bool chunked = chunks_.size() > 1;
  for (size_t s = 0; s + 1 < parts_.size(); ++s) {
    out += s ? "; " : "";
    out += chunked
               ? detail::str("part ", s, " (stage ", s % stages_, ", chunk ", s / stages_, "): ")
               : detail::str("stage ", s, ": ");
    if (parts_[s] == parts_[s + 1]) {
      out += "no layers";
      continue;
    }
    out += "layers " + std::to_string(parts_[s]) + "-" + std::to_string(parts_[s + 1] - 1) + " (";
    for (int i = parts_[s]; i < parts_[s + 1]; ++i)
      out += (i > parts_[s] ? ", " : "") + specs_[i].type_name;
    out += ")";
  }
  return out;
}

}  // namespace zero::pipe
