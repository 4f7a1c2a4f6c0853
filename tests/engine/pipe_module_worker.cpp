// zero::pipe::PipelineModule on real ranks (started by zerorun; --suite module): over a grid of
// pp stages, each rank builds exactly its stage's layers of the partition (parameters, uniform,
// type:block, profile), with the values one process builds under the same seeds and the names
// layers.<i>.<name>; the stages' forwards chained through zero::pipe::exchange give the whole
// model's output; what is refused (more stages than layers, an empty stage, a layer that does not
// return a tensor).
#include "worker_util.h"

#include <zero/engine/pipe/module.h>
#include <zero/engine/pipe/p2p.h>
#include <zero/engine/pipe/partition.h>
#include <zero/engine/engine.h>
#include <zero/engine/init.h>
#include <zero/engine/load_state_dict.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <functional>
#include <map>
#include <optional>
#include <sstream>
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

// Input Linear(8, 16), `blocks` residual tanh blocks, head Linear(16, 1). `tied`: the input
// layer is tied (key "proj") to a layer after the blocks that multiplies by its weight (16 -> 8,
// an LM head reading the embedding), and the head is Linear(8, 1).
std::vector<pipe::LayerSpec> specs(int blocks = 4, bool tied = false) {
  auto input = [] { return torch::nn::AnyModule(torch::nn::Linear(8, 16)); };
  std::vector<pipe::LayerSpec> out;
  if (tied)
    out.push_back(pipe::TiedLayerSpec("proj", "Input", input));
  else
    out.emplace_back("Input", input);
  for (int i = 0; i < blocks; ++i)
    out.emplace_back("Block", [] { return torch::nn::AnyModule(Block()); });
  if (tied)
    out.push_back(pipe::TiedLayerSpec("proj", "InputT", input,
                                      [](torch::nn::AnyModule& m, const torch::Tensor& x) {
                                        return torch::matmul(x, m.get<torch::nn::Linear>()->weight);
                                      }));
  const int64_t width = tied ? 8 : 16;
  out.emplace_back("Head", [width] { return torch::nn::AnyModule(torch::nn::Linear(width, 1)); });
  return out;
}

// What one process builds: layer i after manual_seed(1234 + i) (a tied layer: its key's first
// module again); its parameters and forward.
struct Whole {
  std::map<std::string, torch::Tensor> params;
  std::vector<int64_t> counts;
  std::vector<torch::nn::AnyModule> layers;
  std::vector<pipe::TiedForward> forwards;
  explicit Whole(int blocks = 4, bool tied = false) {
    const std::vector<pipe::LayerSpec> all = specs(blocks, tied);
    std::map<std::string, torch::nn::AnyModule> by_key;
    for (size_t i = 0; i < all.size(); ++i) {
      forwards.push_back(all[i].tied_forward);
      if (by_key.count(all[i].tie_key)) {
        layers.push_back(by_key.at(all[i].tie_key));
        counts.push_back(0);
        continue;
      }
      torch::manual_seed(1234 + static_cast<int64_t>(i));
      layers.push_back(all[i].build());
      if (!all[i].tie_key.empty()) by_key.emplace(all[i].tie_key, layers.back());
      int64_t n = 0;
      for (const auto& item : layers.back().ptr()->named_parameters()) {
        params["layers." + std::to_string(i) + "." + item.key()] = item.value();
        n += item.value().numel();
      }
      counts.push_back(n);
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t i = 0; i < layers.size(); ++i)
      x = forwards[i] ? forwards[i](layers[i], x) : layers[i].forward(x);
    return x;
  }
};

// Two layer types with the same parameters and very different costs: Heavy runs its Linear 40
// times, Light only adds its bias.
struct CostlyImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  int repeats;
  explicit CostlyImpl(int repeats) : repeats(repeats) {
    fc = register_module("fc", torch::nn::Linear(64, 64));
  }
  torch::Tensor forward(torch::Tensor x) {
    if (repeats == 0) return x + fc->bias;
    for (int i = 0; i < repeats; ++i) x = torch::tanh(fc(x));
    return x;
  }
};
TORCH_MODULE(Costly);

// Partition method "profile": two heavy layers then six light ones, balanced by measured time
// (rank 0's, the same on every rank) where "parameters" would split them evenly.
void profile_case(const ParallelGrid& grid, int pp) {
  std::vector<pipe::LayerSpec> costly;
  for (int i = 0; i < 8; ++i) {
    // Light layers do one matmul, not none: a layer of a few microseconds measured 1.5x its twin
    // when a context switch hit all three of its runs, and the six then split 4 / 2 at pp 4.
    const int repeats = i < 2 ? 40 : 1;
    costly.emplace_back(i < 2 ? "Heavy" : "Light",
                        [repeats] { return torch::nn::AnyModule(Costly(repeats)); });
  }
  expect_throw<UsageError>("profile without a sample", "needs PipelineOptions::profile_input", [&] {
    pipe::PipelineModule m(grid, costly, pipe::PipelineOptions().partition_method("profile"));
  });
  torch::manual_seed(7);
  const torch::Tensor sample = torch::randn({32, 64});
  const std::vector<double> seconds = pipe::profile_layers(costly, sample, 1234, *grid.world());
  EXPECT(seconds.size() == 8 && seconds[0] > 8 * seconds[7] && seconds[1] > 8 * seconds[7],
         "profile: the heavy layers measure more than 8x the light ones (",
         seconds.empty() ? 0.0 : seconds[0], " s vs ", seconds.empty() ? 0.0 : seconds[7], " s)");
  const torch::Tensor before = torch::rand({1});
  torch::manual_seed(7);
  torch::randn({32, 64});
  EXPECT(torch::equal(before, torch::rand({1})), "profile: the caller's RNG state is kept");
  pipe::PipelineModule module(
      grid, costly, pipe::PipelineOptions().partition_method("profile").profile_input(sample));
  // What the timing decides for sure: each heavy layer alone on a stage before the light ones
  // (at pp 4 the six light layers split 3 / 3 or, when a context switch hits one of their few
  // microsecond runs on a loaded machine, 2 / 4: both balance the measured times).
  const std::vector<int> parts = module->parts();
  const std::vector<int> expected =
      pp == 2 ? std::vector<int>{0, 1, 8} : std::vector<int>{0, 1, 2, 5, 8};
  const bool balanced = pp == 2
                            ? parts == expected
                            : parts.size() == 5 && parts[0] == 0 && parts[1] == 1 &&
                                  parts[2] == 2 && parts[3] >= 4 && parts[3] <= 6 && parts[4] == 8;
  EXPECT(balanced, "profile at pp ", pp, ": ", module->partition_text());
  EXPECT(pipe::partition_layers("parameters", std::vector<int64_t>(8, 64 * 65),
                                std::vector<std::string>(8, "Costly"), pp) != expected,
         "profile: the parameter counts alone would partition otherwise");
}

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
    profile_case(grid, pp);
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
// schedule (1f1b; interleaved with 2 and 3 model chunks per stage; zb-h1), at ZeRO
// stages 0 to 3, with 1 to 8 micro-batches and gradient clipping, equals one process
// accumulating the same micro-batches' gradients (golden tolerance): every stage's parameters
// and every step's loss. Without clipping the schedules and ZeRO stages give the same bits:
// each parameter accumulates its micro-batches in order under every schedule, and the
// optimizer's update of an element does not depend on where it sits in a shard.
struct TrainCase {
  std::string schedule = "1f1b";
  int chunks = 1, stage = 0, m = 1;
  double clip = 0.05;  // the norm counts every stage's gradients once
  bool tied = false;   // the input layer tied to a layer on the last stage (specs())
  int interval = 0;    // PipelineOptions::activation_checkpoint_interval
  bool init = false;   // the PipelineModule built under zero::Init (stage 3)
};

void train_suite(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  const int64_t steps = 3, micro_rows = 2;
  const int blocks = 6;  // 8 layers: pp 4 x 2 chunks
  for (int pp : {2, 4}) {
    if (w % pp) continue;
    const int dp = w / pp;
    std::vector<TrainCase> cases = {{"1f1b", 1, 0, 1},
                                    {"1f1b", 1, 0, 4},
                                    {"1f1b", 1, 1, 1},
                                    {"1f1b", 1, 1, 8},
                                    {"interleaved", 2, 0, pp},
                                    {"interleaved", 2, 1, 8},
                                    {"1f1b", 1, 2, 4},
                                    {"1f1b", 1, 3, 4},
                                    {"interleaved", 2, 2, 8},
                                    {"interleaved", 2, 3, pp},
                                    {"1f1b", 1, 1, 4, 0},
                                    {"interleaved", 2, 1, 4, 0},
                                    {"1f1b", 1, 3, 4, 0},
                                    {"1f1b", 1, 3, 4, 0, false, 0, true},
                                    {"interleaved", 2, 3, pp, 0.05, true, 0, true},
                                    {"1f1b", 1, 0, 4, 0.05, true},
                                    {"1f1b", 1, 1, 4, 0.05, true},
                                    {"interleaved", 2, 2, pp, 0.05, true},
                                    {"1f1b", 1, 3, 4, 0.05, true},
                                    {"zb-h1", 1, 0, 1},
                                    {"zb-h1", 1, 1, 8},
                                    {"zb-h1", 1, 2, 4, 0},
                                    {"zb-h1", 1, 3, pp, 0.05, true},
                                    {"1f1b", 1, 1, 4, 0, false, 2},
                                    {"interleaved", 2, 3, 8, 0.05, false, 1}};
    if (pp == 2) cases.push_back({"interleaved", 3, 1, 4});
    // Refused alike on every rank, before any collective: chunks the module and the config
    // disagree on, zb-h1 with checkpoints, micro-batches interleaving cannot split.
    auto refused = [&](const std::string& pipeline, int chunks, int m, const std::string& want,
                       int interval = 0) {
      Case c;
      c.gas = m, c.micro = micro_rows;
      c.extra_top = zero::detail::str(R"(, "pipeline": {"stages": )", pp, ", ", pipeline, "}");
      const ParsedConfig parsed = parse(config_json(c, w), w);
      const ParallelGrid grid = parallel_grid(parsed.config, world);
      pipe::PipelineModule module(
          grid, specs(blocks),
          pipe::PipelineOptions().virtual_stages(chunks).activation_checkpoint_interval(interval));
      expect_throw<Error>(pipeline, want, [&] { initialize(module.ptr(), parsed, grid); });
    };
    refused(R"("schedule": "interleaved", "virtual_stages": 2)", 1, pp,
            "the PipelineModule has 1 virtual stages (PipelineOptions::virtual_stages) but the "
            "config's schedule interleaved runs 2");
    refused(R"("schedule": "1f1b")", 2, pp, "runs 1 model chunks per stage");
    refused(R"("schedule": "zb-h1")", 1, pp, "the zb-h1 schedule with activation checkpointing",
            /*interval=*/2);
    refused(R"("schedule": "interleaved", "virtual_stages": 2)", 2, pp + 1,
            "must be a multiple of the pipeline stages");

    torch::Tensor unclipped_bits;  // the whole model after the first unclipped run
    std::ostringstream log;        // rank 0's log while a case initializes
    for (const TrainCase& tc : cases) {
      const int m = tc.m;
      Case c;
      c.stage = tc.stage, c.gas = m, c.micro = micro_rows, c.steps = steps;
      c.clip = tc.clip;
      c.extra_top =
          zero::detail::str(R"(, "pipeline": {"stages": )", pp, R"(, "schedule": ")", tc.schedule,
                            R"(", "virtual_stages": )", tc.chunks, "}",
                            tc.stage == 2 ? R"(, "comms_logger": {"enabled": true})" : "");
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
      Whole whole(blocks, tc.tied);
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
      // The pipeline; under zero::Init each layer keeps only this rank's shard from the moment
      // it is built (a tied one stays whole).
      std::optional<Init> init;
      if (tc.init) init.emplace(parsed, grid);
      pipe::PipelineModule module(
          grid, specs(blocks, tc.tied),
          pipe::PipelineOptions()
              .partition_method("uniform")
              .virtual_stages(tc.chunks)
              .activation_checkpoint_interval(tc.interval)
              .loss_fn([](const torch::Tensor& out, const torch::Tensor& labels) {
                return torch::mse_loss(out, labels);
              }));
      init.reset();
      if (tc.init) {
        int64_t freed = 0, kept = 0;
        for (const auto& [index, layer] : module->owned_layers())
          for (const auto& p : layer.ptr()->parameters())
            if (p.numel() > 30) (p.storage().nbytes() == 0 ? freed : kept) += p.numel();
        bool tied_here = false;  // a tied layer on this stage, whichever chunk holds it
        for (const auto& tie : module->ties())
          for (int st : tie.stages) tied_here = tied_here || st == module->stage();
        EXPECT(freed > 0 && (kept == 0 || tied_here), "zero::Init: ", freed,
               " parameter elements freed at build, ", kept, " kept whole");
      }
      // Fewer micro-batches than stages: allowed, with a warning that names the bubble.
      auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log);
      spdlog::default_logger()->sinks().push_back(sink);
      Engine engine = initialize(module.ptr(), parsed, grid);
      spdlog::default_logger()->sinks().pop_back();
      if (world->rank() == 0)
        EXPECT((log.str().find("each stage idles") != std::string::npos) == (m < pp),
               "the warning about fewer micro-batches (", m, ") than stages (", pp, "): '",
               log.str(), "'");
      log.str("");
      const MemoryReport before = engine.memory_report();
      double worst_loss = 0;
      for (int64_t t = 0; t < steps; ++t) {
        const MemoryReport start = engine.memory_report();
        int j = 0;
        const double loss = engine.train_batch([&] {
          const int64_t r = rows(t, j++, d);
          return pipe::MicroBatch{xs.narrow(0, r, micro_rows), ys.narrow(0, r, micro_rows)};
        });
        EXPECT(j == ((module->is_first_stage() || module->is_last_stage()) ? m : 0),
               "next_micro_batch called ", j, " times on stage ", module->stage());
        worst_loss = std::max(worst_loss, std::abs(loss - want_losses[t]) / want_losses[t]);
        // Stage 3 gathers each of the stage's layers once per batch (they hold a weight above
        // the persistence threshold), whatever the micro-batches and chunks.
        const MemoryReport end = engine.memory_report();
        int64_t layers = 0;  // those with a weight above stage3_param_persistence_threshold (30)
        for (const auto& [index, layer] : module->owned_layers())
          for (const auto& p : layer.ptr()->parameters())
            if (p.numel() > 30) {
              ++layers;
              break;
            }
        if (tc.stage == 3)
          EXPECT(end.unit_gathers - start.unit_gathers == layers, "stage 3 gathered ",
                 end.unit_gathers - start.unit_gathers, " units in a batch, not ", layers);
        // Between batches stage 3 holds its shard of the layers, not the layers.
        if (tc.stage == 3 && dp > 1)
          EXPECT(end.gathered_params_bytes == 0, "stage 3 keeps ", end.gathered_params_bytes,
                 " gathered bytes after a batch");
      }
      // eval_batch: the first batch's micro-batches through the trained stages, no step taken;
      // the loss one process computes with the trained model.
      {
        int j = 0;
        const double eval = engine.eval_batch([&] {
          const int64_t r = rows(0, j++, d);
          return pipe::MicroBatch{xs.narrow(0, r, micro_rows), ys.narrow(0, r, micro_rows)};
        });
        double want_eval = 0;
        {
          torch::NoGradGuard no_grad;
          for (int jj = 0; jj < m; ++jj)
            for (int e = 0; e < dp; ++e) {
              const int64_t r = rows(0, jj, e);
              want_eval += torch::mse_loss(whole.forward(xs.narrow(0, r, micro_rows)),
                                           ys.narrow(0, r, micro_rows))
                               .item<double>();
            }
        }
        want_eval /= m * dp;
        EXPECT(std::abs(eval - want_eval) <= 1e-5 * want_eval, "eval_batch: loss ", eval,
               ", one process ", want_eval);
        EXPECT(engine.global_steps() == steps, "eval_batch stepped: ", engine.global_steps(),
               " steps");
      }
      // activation_checkpoint_interval: the groups of layers ran as checkpoints.
      if (tc.interval > 0)
        EXPECT(engine.activation_checkpointing()->stats().checkpoints > 0,
               "no checkpoint with activation_checkpoint_interval ", tc.interval);
      // Stages 2 and 3 accumulate a pipeline stage's gradients whole over the batch: the full
      // buffer (stage 1's) and the shard.
      if (tc.stage >= 2)
        EXPECT(before.gradients_bytes > 0, "no gradient buffers at stage ", tc.stage);
      // Every stage's parameters whole on every rank, in layer order, named as one process
      // names them (gathered at stage 3).
      const auto full = engine.full_parameters();
      EXPECT(full.size() == whole.params.size(), "full_parameters: ", full.size(),
             " parameters, not ", whole.params.size());
      double worst = 0;
      int last_layer = -1;
      for (const auto& [name, value] : full) {
        EXPECT(whole.params.count(name), "full_parameters names ", name);
        worst = std::max(worst, rel_diff(value, whole.params.at(name)));
        const int layer = std::stoi(name.substr(7, name.find('.', 7) - 7));
        EXPECT(layer >= last_layer, "full_parameters: ", name, " after layer ", last_layer);
        last_layer = layer;
      }
      bool same_bits = true;
      if (c.clip == 0) {
        std::vector<torch::Tensor> values;
        for (const auto& item : full) values.push_back(item.second.flatten());
        const torch::Tensor all = torch::cat(values);
        if (!unclipped_bits.defined())
          unclipped_bits = all;
        else
          same_bits = torch::equal(all, unclipped_bits);
      }
      // Stage 2 reduce-scatters a pipeline stage's gradients once per batch (not per
      // micro-batch): fewer in a batch than its 4 or 8 micro-batches (one per bucket, 3 at most
      // here).
      if (tc.stage == 2 && dp > 1 && !tc.tied) {
        int64_t scatters = 0;
        for (const CommsLog::Entry& e : engine.comms_log()->entries())
          if (e.name.rfind("reduce_scatter", 0) == 0) scatters += e.count;
        EXPECT(scatters > 0 && scatters < steps * m, "stage 2: ", scatters, " reduce-scatters in ",
               steps, " batches of ", m, " micro-batches");
      }
      const std::string label = zero::detail::str(
          "pp ", pp, " x dp ", dp, " ", tc.schedule, " (", tc.chunks, " chunks) stage ", tc.stage,
          " m ", m, tc.clip > 0 ? " clipped" : "", tc.tied ? " tied" : "",
          tc.interval ? zero::detail::str(" checkpoint every ", tc.interval) : "",
          tc.init ? " under zero::Init" : "");
      // The tied module's copies on the stages that hold it have the same bits (stages 0-2:
      // whole between batches).
      if (tc.tied && tc.stage <= 2) {
        const int64_t n = whole.params.at("layers.0.weight").numel();
        torch::Tensor copies = torch::zeros({pp, n});
        torch::Tensor holds = torch::zeros({pp});
        for (const auto& item : module->named_parameters())
          if (item.key() == "layers.0.weight" && d == 0) {
            copies[module->stage()].copy_(item.value().detach().flatten());
            holds[module->stage()] = 1;
          }
        world->all_reduce(copies, ReduceOp::kSum)->wait();
        world->all_reduce(holds, ReduceOp::kSum)->wait();
        int holders = 0;
        for (int st = 0; st < pp; ++st) {
          if (holds[st].item<double>() == 0) continue;
          ++holders;
          EXPECT(torch::equal(copies[st], copies[0]), label, ": the tied copy on stage ", st,
                 " differs from stage 0's");
        }
        EXPECT(holders >= 2, label, ": the tied module is on ", holders, " stages");
      }
      EXPECT(worst <= 1e-5 && worst_loss <= 1e-5, label, ": parameters differ by ", worst,
             ", losses by ", worst_loss);
      EXPECT(same_bits, label, ": the parameters are not the bits of the other unclipped schedule");
      if (world->rank() == 0)
        std::printf("%s: max rel diff %.3g, losses %.3g\n", label.c_str(), worst, worst_loss);
      if (tc.stage == 0 && m == 1) {
        expect_throw<UsageError>("backward on a pipeline", "train with engine.train_batch", [&] {
          engine.backward(torch::zeros({1}, torch::requires_grad()));
        });
      }
    }
  }
}

// ckpt (4 ranks; ZERO_TEST_CKPT_DIR): a checkpoint of a pipeline loads at another grid by layer
// name, with no conversion: saved at pp 2 x dp 2, ZeRO stage 3 (1f1b, a tied layer across the
// stages), it goes on at pp 4 (interleaved, stage 1) and at pp 1 x dp 4 (no pipeline, stage 0)
// equal to the saving run's next step (golden tolerance), and at the saving grid bit for bit.
// The global batch stays 8 rows (2 per micro-batch x micro-batches x data ranks).
struct Grid {
  int pp, stage, m;
  std::string schedule = "1f1b";
  int chunks = 1;
};

void ckpt_suite(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  const int64_t micro_rows = 2, steps = 3, save_after = 2;
  const char* root = std::getenv("ZERO_TEST_CKPT_DIR");
  EXPECT(root && *root, "set ZERO_TEST_CKPT_DIR");
  const std::string dir = std::string(root) + "/pipe";
  torch::manual_seed(11);
  const torch::Tensor xs = torch::randn({steps * 8, 8}), ys = torch::randn({steps * 8, 1});
  // Trains steps [from, to) at `grid`, loading `load` first when given, saving after
  // save_after steps when `save`; returns the whole model after the last step.
  using After = std::function<void(Engine&, pipe::PipelineModule&)>;
  auto run = [&](const Grid& g, int64_t from, int64_t to, bool load, bool save,
                 const After& after = {}) {
    Case c;
    c.stage = g.stage, c.gas = g.m, c.micro = micro_rows, c.steps = static_cast<int>(steps);
    c.clip = 0.05;
    c.extra_top = zero::detail::str(R"(, "pipeline": {"stages": )", g.pp, R"(, "schedule": ")",
                                    g.schedule, R"(", "virtual_stages": )", g.chunks, "}");
    const ParsedConfig parsed = parse(config_json(c, w), w);
    const ParallelGrid grid = parallel_grid(parsed.config, world);
    const int dp = grid.data_size(), d = grid.data_rank();
    pipe::PipelineModule module(
        grid, specs(6, /*tied=*/true),
        pipe::PipelineOptions().partition_method("uniform").virtual_stages(g.chunks).loss_fn(
            [](const torch::Tensor& out, const torch::Tensor& y) {
              return torch::mse_loss(out, y);
            }));
    Engine engine = initialize(module.ptr(), parsed, grid);
    if (load) EXPECT(engine.load_checkpoint(dir).has_value(), "no checkpoint in ", dir);
    auto rows = [&](int64_t t, int j) { return t * 8 + (j * dp + d) * micro_rows; };
    for (int64_t t = from; t < to; ++t) {
      if (g.pp > 1) {
        int j = 0;
        engine.train_batch([&] {
          const int64_t r = rows(t, j++);
          return pipe::MicroBatch{xs.narrow(0, r, micro_rows), ys.narrow(0, r, micro_rows)};
        });
      } else {
        for (int j = 0; j < g.m; ++j) {
          const int64_t r = rows(t, j);
          engine.backward(torch::mse_loss(module->forward(xs.narrow(0, r, micro_rows)),
                                          ys.narrow(0, r, micro_rows)));
          engine.step();
        }
      }
      if (save && t + 1 == save_after) engine.save_checkpoint(dir, "pipe");
    }
    if (after) after(engine, module);
    std::map<std::string, torch::Tensor> out;
    for (const auto& [name, value] : engine.full_parameters()) out[name] = value;
    return out;
  };
  const Grid saving{2, 3, 2};
  const auto want = run(saving, 0, steps, false, true);
  const std::vector<std::pair<std::string, Grid>> grids = {
      {"the saving grid", saving},
      {"pp 4 interleaved, stage 1", Grid{4, 1, 4, "interleaved", 2}},
      {"pp 1 x dp 4, stage 0", Grid{1, 0, 1}}};
  for (const auto& [label, g] : grids) {
    const auto got = run(g, save_after, steps, true, false);
    EXPECT(got.size() == want.size(), label, ": ", got.size(), " parameters, not ", want.size());
    double worst = 0;
    bool same_bits = true;
    for (const auto& [name, value] : want) {
      EXPECT(got.count(name), label, ": no ", name);
      if (!got.count(name)) continue;
      worst = std::max(worst, rel_diff(got.at(name), value));
      same_bits = same_bits && torch::equal(got.at(name), value);
    }
    EXPECT(worst <= 1e-5, label, ": the step after loading differs by ", worst);
    if (g.pp == saving.pp && g.stage == saving.stage)
      EXPECT(same_bits, label, ": not the saving run's bits");
    if (world->rank() == 0)
      std::printf(
          "pipeline checkpoint saved at pp 2 x dp 2 stage 3, loaded at %s: max rel diff %.3g%s\n",
          label.c_str(), worst, same_bits ? " (same bits)" : "");
  }
  // save_16bit_model at pp 4 writes every stage's layers (a tied one once) into one file, which
  // load_state_dict puts back into a pp 2 engine's stages: the same values.
  const std::string weights = std::string(root) + "/weights";
  std::map<std::string, torch::Tensor> saved16;
  run(Grid{4, 1, 4, "interleaved", 2}, 0, 1, false, false, [&](Engine& e, pipe::PipelineModule&) {
    EXPECT(e.save_16bit_model(weights), "save_16bit_model saved nothing");
    for (const auto& [name, value] : e.full_parameters()) saved16[name] = value;
  });
  run(saving, 0, 0, false, false, [&](Engine& e, pipe::PipelineModule& m) {
    const LoadedStateDict r = load_state_dict(*m, weights + "/model.safetensors");
    EXPECT(r.missing_keys.empty() && r.unexpected_keys.empty(),
           "load_state_dict: ", r.missing_keys.size(), " missing, ", r.unexpected_keys.size(),
           " unexpected");
    const auto full = e.full_parameters();
    EXPECT(full.size() == saved16.size(), "load_state_dict: ", full.size(), " parameters");
    for (const auto& [name, value] : full)
      EXPECT(saved16.count(name) && torch::equal(saved16.at(name), value),
             "load_state_dict: ", name, " is not the saved value");
  });
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"module", module_suite}, {"train", train_suite}, {"ckpt", ckpt_suite}});
}
