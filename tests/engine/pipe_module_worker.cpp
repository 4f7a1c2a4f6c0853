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

#include <cstdlib>
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

// Input Linear(8, 16), `blocks` residual tanh blocks, head Linear(16, 1).
std::vector<pipe::LayerSpec> specs(int blocks = 4) {
  std::vector<pipe::LayerSpec> out;
  out.emplace_back("Input", [] { return torch::nn::AnyModule(torch::nn::Linear(8, 16)); });
  for (int i = 0; i < blocks; ++i)
    out.emplace_back("Block", [] { return torch::nn::AnyModule(Block()); });
  out.emplace_back("Head", [] { return torch::nn::AnyModule(torch::nn::Linear(16, 1)); });
  return out;
}

// What one process builds: layer i after manual_seed(1234 + i); its parameters and forward.
struct Whole {
  std::map<std::string, torch::Tensor> params;
  std::vector<int64_t> counts;
  std::vector<torch::nn::AnyModule> layers;
  explicit Whole(int blocks = 4) {
    const std::vector<pipe::LayerSpec> all = specs(blocks);
    for (size_t i = 0; i < all.size(); ++i) {
      torch::manual_seed(1234 + static_cast<int64_t>(i));
      layers.push_back(all[i].build());
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

// train: the model trained by Engine::train_batch over pp stages (x dp data ranks) with each
// schedule the executor runs (1f1b; interleaved with 2 and 3 model chunks per stage), at ZeRO
// stages 0 and 1, with 1 to 8 micro-batches and gradient clipping, equals one process
// accumulating the same micro-batches' gradients (golden tolerance): every stage's parameters
// and every step's loss. Without clipping the schedules give the same gradients' bits (each
// parameter accumulates its micro-batches in order under every schedule), and so the same
// parameters when the optimizer's kernel is the scalar one (ZERO_CPU_SIMD=scalar, as
// pipe_train_w4 runs): the SIMD kernels fuse a multiply-add in vector lanes but not in their
// scalar tails, and a schedule's partition moves a parameter's elements between the two.
struct TrainCase {
  std::string schedule = "1f1b";
  int chunks = 1, stage = 0, m = 1;
  double clip = 0.05;  // the norm counts every stage's gradients once
};

void train_suite(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  const int64_t steps = 3, micro_rows = 2;
  const int blocks = 6;  // 8 layers: pp 4 x 2 chunks
  for (int pp : {2, 4}) {
    if (w % pp) continue;
    const int dp = w / pp;
    std::vector<TrainCase> cases = {{"1f1b", 1, 0, 1},         {"1f1b", 1, 0, 4},
                                    {"1f1b", 1, 1, 1},         {"1f1b", 1, 1, 8},
                                    {"interleaved", 2, 0, pp}, {"interleaved", 2, 1, 8},
                                    {"1f1b", 1, 1, 4, 0},      {"interleaved", 2, 1, 4, 0}};
    if (pp == 2) cases.push_back({"interleaved", 3, 1, 4});
    // Refused alike on every rank, before any collective: chunks the module and the config
    // disagree on, a schedule that does not run yet, micro-batches interleaving cannot split.
    auto refused = [&](const std::string& pipeline, int chunks, int m, const std::string& want) {
      Case c;
      c.gas = m, c.micro = micro_rows;
      c.extra_top = zero::detail::str(R"(, "pipeline": {"stages": )", pp, ", ", pipeline, "}");
      const ParsedConfig parsed = parse(config_json(c, w), w);
      const ParallelGrid grid = parallel_grid(parsed.config, world);
      pipe::PipelineModule module(grid, specs(blocks),
                                  pipe::PipelineOptions().virtual_stages(chunks));
      expect_throw<Error>(pipeline, want, [&] { initialize(module.ptr(), parsed, grid); });
    };
    refused(R"("schedule": "interleaved", "virtual_stages": 2)", 1, pp,
            "the PipelineModule has 1 virtual stages (PipelineOptions::virtual_stages) but the "
            "config's schedule interleaved runs 2");
    refused(R"("schedule": "1f1b")", 2, pp, "runs 1 model chunks per stage");
    refused(R"("schedule": "zb-h1")", 1, pp, "zb-h1 runs on the simulator only yet");
    refused(R"("schedule": "interleaved", "virtual_stages": 2)", 2, pp + 1,
            "must be a multiple of the pipeline stages");

    torch::Tensor unclipped_bits;  // the whole model after the first unclipped run
    for (const TrainCase& tc : cases) {
      const int m = tc.m;
      Case c;
      c.stage = tc.stage, c.gas = m, c.micro = micro_rows, c.steps = steps;
      c.clip = tc.clip;
      c.extra_top = zero::detail::str(R"(, "pipeline": {"stages": )", pp, R"(, "schedule": ")",
                                      tc.schedule, R"(", "virtual_stages": )", tc.chunks, "}");
      const ParsedConfig parsed = parse(config_json(c, w), w);
      const ParallelGrid grid = parallel_grid(parsed.config, world);
      const int d = grid.data_rank();
      // The data: rows of micro-batch j of data rank e in step t, as one process takes them.
      const int64_t global = micro_rows * m * dp;
      torch::manual_seed(11);
      const torch::Tensor xs = torch::randn({steps * global, 8});
      const torch::Tensor ys = torch::randn({steps * global, 1});
      auto rows = [&](int64_t t, int j, int e) {
        return (t * m + j) * dp * micro_rows + e * micro_rows;
      };
      // One process: the whole model, the same optimizer and schedule, gradients accumulated.
      Whole whole(blocks);
      std::vector<torch::Tensor> params;  // the whole model's own parameters
      for (auto& [name, p] : whole.params) params.push_back(p);
      torch::optim::AdamW opt(
          params,
          torch::optim::AdamWOptions(0.01).betas({0.8, c.beta2}).eps(c.eps).weight_decay(0.05));
      auto schedule = LrSchedule::create(parsed.config.scheduler, parsed.config.optimizer.lr);
      std::vector<double> want_losses;
      for (int64_t t = 0; t < steps; ++t) {
        for (auto& g : opt.param_groups()) g.options().set_lr(schedule->lr_at(t));
        opt.zero_grad();
        double sum = 0;
        for (int j = 0; j < m; ++j)
          for (int e = 0; e < dp; ++e) {
            const int64_t r = rows(t, j, e);
            const torch::Tensor l = torch::mse_loss(whole.forward(xs.narrow(0, r, micro_rows)),
                                                    ys.narrow(0, r, micro_rows));
            (l / static_cast<double>(m * dp)).backward();
            sum += l.item<double>();
          }
        want_losses.push_back(sum / (m * dp));
        if (c.clip > 0) torch::nn::utils::clip_grad_norm_(params, c.clip);
        opt.step();
      }
      // The pipeline.
      pipe::PipelineModule module(
          grid, specs(blocks),
          pipe::PipelineOptions().partition_method("uniform").virtual_stages(tc.chunks).loss_fn(
              [](const torch::Tensor& out, const torch::Tensor& labels) {
                return torch::mse_loss(out, labels);
              }));
      Engine engine = initialize(module.ptr(), parsed, grid);
      double worst_loss = 0;
      for (int64_t t = 0; t < steps; ++t) {
        int j = 0;
        const double loss = engine.train_batch([&] {
          const int64_t r = rows(t, j++, d);
          return pipe::MicroBatch{xs.narrow(0, r, micro_rows), ys.narrow(0, r, micro_rows)};
        });
        EXPECT(j == ((module->is_first_stage() || module->is_last_stage()) ? m : 0),
               "next_micro_batch called ", j, " times on stage ", module->stage());
        worst_loss = std::max(worst_loss, std::abs(loss - want_losses[t]) / want_losses[t]);
      }
      double worst = 0;
      for (const auto& item : module->named_parameters())
        worst = std::max(worst, rel_diff(item.value(), whole.params.at(item.key())));
      bool same_bits = true;
      if (c.clip == 0) {
        // Every stage's parameters on every rank: each from its stage's data rank 0, the others
        // adding zeros (exact), in the whole model's order.
        std::vector<torch::Tensor> pieces;
        std::map<std::string, torch::Tensor> mine;
        for (const auto& item : module->named_parameters()) mine[item.key()] = item.value();
        for (const auto& [name, value] : whole.params)
          pieces.push_back(mine.count(name) && d == 0 ? mine.at(name).detach().flatten()
                                                      : torch::zeros({value.numel()}));
        torch::Tensor all = torch::cat(pieces);
        world->all_reduce(all, ReduceOp::kSum)->wait();
        if (!unclipped_bits.defined())
          unclipped_bits = all;
        else
          same_bits = torch::equal(all, unclipped_bits);
      }
      const std::string label =
          zero::detail::str("pp ", pp, " x dp ", dp, " ", tc.schedule, " (", tc.chunks,
                            " chunks) stage ", tc.stage, " m ", m, tc.clip > 0 ? " clipped" : "");
      EXPECT(worst <= 1e-5 && worst_loss <= 1e-5, label, ": parameters differ by ", worst,
             ", losses by ", worst_loss);
      const char* simd = std::getenv("ZERO_CPU_SIMD");
      if (simd && std::string(simd) == "scalar")
        EXPECT(same_bits, label,
               ": the parameters are not the bits of the other unclipped schedule");
      if (world->rank() == 0)
        std::printf("%s: max rel diff %.3g, losses %.3g\n", label.c_str(), worst, worst_loss);
      if (tc.stage == 0 && m == 1) {
        expect_throw<UsageError>("backward on a pipeline", "train with engine.train_batch", [&] {
          engine.backward(torch::zeros({1}, torch::requires_grad()));
        });
        expect_throw<UsageError>("a checkpoint of a pipeline", "not yet with pipeline stages",
                                 [&] { engine.save_checkpoint("/nonexistent"); });
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv, {{"module", module_suite}, {"train", train_suite}});
}
