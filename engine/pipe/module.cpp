// PipelineModule: the partition, the seeded build of this stage's layers, their forward.
#include <zero/engine/pipe/module.h>

#include <zero/engine/pipe/partition.h>
#include <zero/error.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>
#include <spdlog/spdlog.h>
#include <torch/utils.h>

#include <algorithm>
#include <cctype>
#include <mutex>

namespace zero::pipe {
namespace {

// Trainable parameters of each layer, each built once under the caller's RNG state, which is
// restored afterwards: counting draws nothing the model's build would see.
std::vector<int64_t> count_trainable(const std::vector<LayerSpec>& specs) {
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  at::Tensor saved;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    saved = gen.get_state();
  }
  std::vector<int64_t> counts;
  for (const LayerSpec& s : specs) {
    int64_t n = 0;
    for (const at::Tensor& p : s.build().ptr()->parameters(/*recurse=*/true))
      if (p.requires_grad()) n += p.numel();
    counts.push_back(n);
  }
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(saved);
  return counts;
}

}  // namespace

PipelineModuleImpl::PipelineModuleImpl(const ParallelGrid& grid, std::vector<LayerSpec> layers,
                                       PipelineOptions options)
    : specs_(std::move(layers)), options_(std::move(options)), stage_(grid.pipeline_rank()) {
  const int stages = grid.pipeline_size();
  const int n = num_layers();
  ZERO_CHECK(n >= stages, UsageError, "PipelineModule: ", n, " layers cannot fill ", stages,
             " pipeline stages (each stage needs at least one layer)");
  std::vector<std::string> names;
  for (const LayerSpec& s : specs_) names.push_back(s.type_name);
  std::string method = options_.partition_method();
  std::transform(method.begin(), method.end(), method.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const bool counts_needed = method == "parameters";
  parts_ = partition_layers(options_.partition_method(),
                            counts_needed ? count_trainable(specs_) : std::vector<int64_t>(n, 0),
                            names, stages);
  for (int s = 0; s < stages; ++s)
    ZERO_CHECK(parts_[s + 1] > parts_[s], UsageError, "PipelineModule: partition method '",
               options_.partition_method(), "' leaves pipeline stage ", s, " without layers (",
               partition_text(), "); use another method or fewer stages");
  auto container = register_module("layers", std::make_shared<torch::nn::Module>());
  for (int i = parts_[stage_]; i < parts_[stage_ + 1]; ++i) {
    torch::manual_seed(static_cast<uint64_t>(options_.base_seed() + i));
    torch::nn::AnyModule layer = specs_[i].build();
    container->register_module(std::to_string(i), layer.ptr());
    owned_.emplace_back(i, std::move(layer));
  }
  if (grid.world()->rank() == 0)
    spdlog::info("[rank 0] pipeline partition ({}): {}", options_.partition_method(),
                 partition_text());
}

at::Tensor PipelineModuleImpl::forward(const at::Tensor& x) {
  at::Tensor h = x;
  for (auto& [index, layer] : owned_) {
    try {
      h = layer.forward<at::Tensor>(h);
    } catch (const c10::Error& e) {
      // AnyModule's "Attempted to cast ... to the requested type" means a non-tensor output.
      throw UsageError("PipelineModule: layer " + std::to_string(index) + " (" +
                       specs_[index].type_name + ") on pipeline stage " + std::to_string(stage_) +
                       " failed or did not return one tensor: " + e.what_without_backtrace());
    }
  }
  return h;
}

std::string PipelineModuleImpl::partition_text() const {
  std::string out;
  for (size_t s = 0; s + 1 < parts_.size(); ++s) {
    out += (s ? "; stage " : "stage ") + std::to_string(s) + ": ";
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
