// Tensor-parallel layers inside pipeline stages on real ranks (started by zerorun on 4 ranks;
// --suite tp): tp 2 x pp 2 trains the model tp 2 x dp 2 trains without a pipeline; activations
// and gradients cross stages as 1/tp slices or whole with the same bits; the slices and the
// check that refuses slicing tensors the tensor ranks do not share.
#include "worker_util.h"

#include <zero/engine/engine.h>
#include <zero/engine/pipe/module.h>
#include <zero/engine/pipe/p2p.h>
#include <zero/tp/layers.h>

#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

using namespace zero;
using namespace zero::test;

namespace {

// tp (4 ranks): tensor-parallel layers inside pipeline stages (tp 2 x pp 2, blocks of a
// column- and a row-parallel linear layer on the grid's tensor group) train the model tp 2 x dp 2
// without a pipeline trains, each step's 8 rows alike: with 1f1b at ZeRO stage 1, zb-h1 at stage
// 3; every parameter whole (full_parameters) to golden tolerance.
struct TpBlockImpl : torch::nn::Module {
  tp::ColumnParallelLinear up{nullptr};
  tp::RowParallelLinear down{nullptr};
  explicit TpBlockImpl(const std::shared_ptr<Communicator>& group) {
    up = register_module("up",
                         tp::ColumnParallelLinear(tp::ColumnParallelLinearOptions(16, 32), group));
    down =
        register_module("down", tp::RowParallelLinear(tp::RowParallelLinearOptions(32, 16), group));
  }
  torch::Tensor forward(const torch::Tensor& x) { return x + down(torch::tanh(up(x))); }
};
TORCH_MODULE(TpBlock);

void tp_suite(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  const int64_t micro_rows = 2, steps = 3;
  torch::manual_seed(11);
  const torch::Tensor xs = torch::randn({steps * 8, 8}), ys = torch::randn({steps * 8, 1});
  auto run = [&](int pp, int stage, int m, const std::string& schedule,
                 const std::string& pipeline_keys = "") {
    Case c;
    c.stage = stage, c.gas = m, c.micro = micro_rows, c.steps = static_cast<int>(steps);
    c.clip = 0.05;
    c.extra_top =
        zero::detail::str(R"(, "tensor_parallel": {"autotp_size": 2}, "pipeline": {"stages": )", pp,
                          R"(, "schedule": ")", schedule, R"(")", pipeline_keys, "}");
    const ParsedConfig parsed = parse(config_json(c, w), w);
    const ParallelGrid grid = parallel_grid(parsed.config, world);
    const int dp = grid.data_size(), d = grid.data_rank();
    std::vector<pipe::LayerSpec> layers;
    layers.emplace_back("Input", [] { return torch::nn::AnyModule(torch::nn::Linear(8, 16)); });
    for (int i = 0; i < 4; ++i)
      layers.emplace_back("TpBlock",
                          [&grid] { return torch::nn::AnyModule(TpBlock(grid.tensor_group())); });
    layers.emplace_back("Head", [] { return torch::nn::AnyModule(torch::nn::Linear(16, 1)); });
    pipe::PipelineModule module(grid, layers,
                                pipe::PipelineOptions().partition_method("uniform").loss_fn(
                                    [](const torch::Tensor& out, const torch::Tensor& y) {
                                      return torch::mse_loss(out, y);
                                    }));
    Engine engine = initialize(module.ptr(), parsed, grid);
    auto rows = [&](int64_t t, int j) { return t * 8 + (j * dp + d) * micro_rows; };
    for (int64_t t = 0; t < steps; ++t) {
      if (pp > 1) {
        int j = 0;
        engine.train_batch([&] {
          const int64_t r = rows(t, j++);
          return pipe::MicroBatch{xs.narrow(0, r, micro_rows), ys.narrow(0, r, micro_rows)};
        });
      } else {
        for (int j = 0; j < m; ++j) {
          const int64_t r = rows(t, j);
          engine.backward(torch::mse_loss(module->forward(xs.narrow(0, r, micro_rows)),
                                          ys.narrow(0, r, micro_rows)));
          engine.step();
        }
      }
    }
    std::map<std::string, torch::Tensor> out;
    for (const auto& [name, value] : engine.full_parameters()) out[name] = value;
    return out;
  };
  const auto want = run(1, 1, 2, "1f1b");
  // Activations and gradients cross stages as 1/tp slices (pipe_partitioned, grad_partitioned,
  // DeepSpeed's defaults) or whole: the same bits, the slices being exact copies.
  const auto sliced = run(2, 1, 4, "1f1b");
  const auto whole =
      run(2, 1, 4, "1f1b", R"(, "pipe_partitioned": false, "grad_partitioned": false)");
  for (const auto& [name, value] : sliced)
    EXPECT(whole.count(name) && torch::equal(whole.at(name), value), "tp 2 x pp 2: ", name,
           " differs between sliced and whole activations");
  for (const auto& [label, got] :
       {std::make_pair(std::string("tp 2 x pp 2, 1f1b, stage 1"), sliced),
        std::make_pair(std::string("tp 2 x pp 2, zb-h1, stage 3"), run(2, 3, 4, "zb-h1"))}) {
    EXPECT(got.size() == want.size(), label, ": ", got.size(), " parameters, not ", want.size());
    double worst = 0;
    for (const auto& [name, value] : want) {
      EXPECT(got.count(name), label, ": no ", name);
      if (got.count(name)) worst = std::max(worst, rel_diff(got.at(name), value));
    }
    EXPECT(worst <= 1e-5, label, ": parameters differ from tp 2 x dp 2's by ", worst);
    if (world->rank() == 0)
      std::printf("%s against tp 2 x dp 2 without a pipeline: max rel diff %.3g\n", label.c_str(),
                  worst);
  }
  // The slices: 1/tp of a tensor each (the last padded), whole again after the all-gather.
  const ParallelGrid grid = parallel_grid(world, GridSizes{2, 2});
  Communicator& tensor_group = *grid.tensor_group();
  const torch::Tensor odd = torch::arange(21, torch::kFloat).view({7, 3, 1});
  const std::vector<torch::Tensor> mine = pipe::scatter_for_stage(odd, grid.tensor_rank(), 2);
  EXPECT(mine.size() == 2 && mine[0].numel() == 11, "a slice of 21 elements over 2 ranks has ",
         mine[0].numel(), " elements, not 11");
  EXPECT(torch::equal(pipe::gather_from_stage(tensor_group, mine, "a test tensor"), odd),
         "the slices all-gathered give the tensor back");
  // Tensors that differ between the tensor ranks (a sequence-parallel layer's) cannot be sliced.
  expect_throw<UsageError>("pipe_partitioned over unequal tensors",
                           "pipeline.pipe_partitioned: the activation x", [&] {
                             pipe::check_replicated(tensor_group, odd + grid.tensor_rank(),
                                                    "activation x", "pipe_partitioned");
                           });
  pipe::check_replicated(tensor_group, odd, "activation x", "pipe_partitioned");
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv, {{"tp", tp_suite}});
}
