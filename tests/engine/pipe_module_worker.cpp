// zero::pipe::PipelineModule on real ranks (started by zerorun; --suite module): over a grid of
// pp stages, each rank builds exactly its stage's layers of the partition (parameters, uniform,
// type:block), with the values one process builds under the same seeds and the names
// layers.<i>.<name>; the stages' forwards chained through zero::pipe::exchange give the whole
// model's output; what is refused (more stages than layers, an empty stage, a layer that does not
// return a tensor).
#include "worker_util.h"

#include <zero/engine/pipe/module.h>
#include <zero/engine/pipe/p2p.h>
#include <zero/engine/pipe/partition.h>

#include <torch/torch.h>

#include <map>
#include <string>
#include <tuple>
#include <vector>

using namespace zero;
using namespace zero::test;

namespace {

struct BlockImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  BlockImpl() { fc = register_module("fc", torch::nn::Linear(16, 16)); }
  torch::Tensor forward(const torch::Tensor& x) { return x + torch::tanh(fc(x)); }
};
TORCH_MODULE(Block);

// Input Linear(8, 16), four residual tanh blocks, head Linear(16, 1).
std::vector<pipe::LayerSpec> specs() {
  std::vector<pipe::LayerSpec> out;
  out.emplace_back("Input", [] { return torch::nn::AnyModule(torch::nn::Linear(8, 16)); });
  for (int i = 0; i < 4; ++i)
    out.emplace_back("Block", [] { return torch::nn::AnyModule(Block()); });
  out.emplace_back("Head", [] { return torch::nn::AnyModule(torch::nn::Linear(16, 1)); });
  return out;
}

// What one process builds: layer i after manual_seed(1234 + i); its parameters and forward.
struct Whole {
  std::map<std::string, torch::Tensor> params;
  std::vector<int64_t> counts;
  std::vector<torch::nn::AnyModule> layers;
  Whole() {
    for (size_t i = 0; i < specs().size(); ++i) {
      torch::manual_seed(1234 + static_cast<int64_t>(i));
      layers.push_back(specs()[i].build());
      int64_t n = 0;
      for (const auto& item : layers.back().ptr()->named_parameters()) {
        params["layers." + std::to_string(i) + "." + item.key()] = item.value();
        n += item.value().numel();
      }
      counts.push_back(n);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (auto& l : layers) x = l.forward(x);
    return x;
  }
};

struct TupleOut : torch::nn::Module {
  std::tuple<torch::Tensor, torch::Tensor> forward(const torch::Tensor& x) { return {x, x}; }
};

void module_suite(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  for (int pp : {2, 4}) {
    if (w % pp) continue;
    const ParallelGrid grid = parallel_grid(world, GridSizes{1, pp});
    Whole whole;
    std::vector<std::string> types;
    for (const auto& s : specs()) types.push_back(s.type_name);
    for (const std::string method : {"parameters", "uniform", "type:block"}) {
      torch::manual_seed(99);  // the module's build must not depend on the RNG before it
      pipe::PipelineModule module(grid, specs(), pipe::PipelineOptions().partition_method(method));
      const std::vector<int> parts = pipe::partition_layers(method, whole.counts, types, pp);
      EXPECT(module->parts() == parts, method, ": the partition");
      const int s = grid.pipeline_rank();
      std::map<std::string, torch::Tensor> mine;
      for (const auto& item : module->named_parameters()) mine[item.key()] = item.value();
      size_t expected_count = 0;
      for (const auto& [name, value] : whole.params) {
        const int layer = std::stoi(name.substr(7, name.find('.', 7) - 7));
        if (layer < parts[s] || layer >= parts[s + 1]) continue;
        ++expected_count;
        EXPECT(mine.count(name) && torch::equal(mine.at(name), value), method, ": stage ", s,
               " holds ", name, " as one process builds it");
      }
      EXPECT(mine.size() == expected_count, method, ": stage ", s, " holds ", mine.size(),
             " parameters, not ", expected_count);
      // The stages' forwards chained: stage 0 gets the inputs, the last returns the output.
      torch::manual_seed(5);
      const torch::Tensor x = torch::randn({3, 8});
      Communicator& pipe_group = *grid.pipeline_group();
      torch::Tensor h = x;
      if (!module->is_first_stage())
        h = pipe::exchange(pipe_group, {}, {{s - 1, "activation"}}, at::kCPU)[0][0];
      h = module->forward(h);
      if (!module->is_last_stage())
        pipe::exchange(pipe_group, {{s + 1, {h}, "activation"}}, {}, at::kCPU);
      else
        EXPECT(torch::allclose(h, whole.forward(x)), method,
               ": the chained stages give the whole model's output");
    }
    // Refused on every rank alike, before any collective.
    const std::vector<pipe::LayerSpec> all = specs();
    const std::vector<pipe::LayerSpec> three(all.begin(), all.begin() + 3);
    if (pp == 4)
      expect_throw<UsageError>("more stages than layers", "3 layers cannot fill 4 pipeline stages",
                               [&] { pipe::PipelineModule m(grid, three); });
    auto tuple_layer = specs();
    tuple_layer.back() = pipe::LayerSpec(
        "TupleOut", [] { return torch::nn::AnyModule(std::make_shared<TupleOut>()); });
    pipe::PipelineModule odd(grid, tuple_layer,
                             pipe::PipelineOptions().partition_method("uniform"));
    if (odd->is_last_stage())
      expect_throw<UsageError>("a layer returning a tuple", "did not return one tensor", [&] {
        odd->forward(torch::zeros({1, 16}));
      });
  }
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv, {{"module", module_suite}});
}
