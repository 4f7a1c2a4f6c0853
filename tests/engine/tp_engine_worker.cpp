// The engine with tensor parallelism, started by zerorun: ZeRO stages 0-3 over the data group of
// a dp x tp grid, on a residual MLP of zero::tp Column/Row layers (a frozen input layer, a
// replicated LayerNorm and head, blocks in zero::Sharded), against one plain LibTorch process
// on the global batch with the same model built from torch::nn::Linear:
//  --suite tp2 / tp4: every step's gradient norm (which counts replicated parameters once) and
//                     the parameters after training (full_parameters assembles the whole
//                     tensors from the slices) to 1e-5; save_16bit_model's file, loaded into the
//                     plain model, holds the same whole tensors, and load_state_dict cuts it
//                     back into tensor-parallel models (before and after initialize);
//  --suite ckpt:      checkpoints saved at one (tp, dp, stage) and loaded at others;
//  --suite baduse:    what is refused, on every rank, before any collective.
#include "worker_util.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>

#include <zero/comm/parallel_grid.h>
#include <zero/engine/init.h>
#include <zero/engine/load_state_dict.h>
#include <zero/tp/layers.h>

using namespace zero;
using namespace zero::test;

namespace {

constexpr int kHidden = 32;  // divisible by 1, 2 and 4

// x + Row(gelu(Column(x))) with zero::tp layers on `group`, or with plain Linear layers (null).
struct TpBlockImpl : torch::nn::Module {
  torch::nn::Linear col_plain{nullptr}, row_plain{nullptr};
  tp::ColumnParallelLinear col{nullptr};
  tp::RowParallelLinear row{nullptr};
  explicit TpBlockImpl(const std::shared_ptr<Communicator>& group) {
    if (group) {
      col = register_module(
          "col", tp::ColumnParallelLinear(tp::ColumnParallelLinearOptions(kWidth, kHidden), group));
      row = register_module(
          "row", tp::RowParallelLinear(tp::RowParallelLinearOptions(kHidden, kWidth), group));
    } else {
      col_plain = register_module("col", torch::nn::Linear(kWidth, kHidden));
      row_plain = register_module("row", torch::nn::Linear(kHidden, kWidth));
    }
  }
  torch::Tensor forward(const torch::Tensor& x) {
    if (col) return x + row(torch::gelu(col(x)));
    return x + row_plain(torch::gelu(col_plain(x)));
  }
};
TORCH_MODULE(TpBlock);

// frozen Linear(127, 24) -> LayerNorm -> 2 blocks (each in zero::Sharded) -> head Linear(24, 1).
// The tp layers draw what the plain ones draw, so one seed gives one model at every degree.
struct TpNetImpl : torch::nn::Module {
  torch::nn::Linear input{nullptr}, head{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::nn::ModuleList blocks;
  TpNetImpl(int64_t seed, const std::shared_ptr<Communicator>& group) {
    torch::manual_seed(seed);
    input = register_module("input", torch::nn::Linear(kIn, kWidth));
    for (auto& p : input->parameters()) p.set_requires_grad(false);
    norm = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({kWidth})));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int i = 0; i < 2; ++i) blocks->push_back(zero::Sharded(TpBlock(group)));
    head = register_module("head", torch::nn::Linear(kWidth, 1));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor h = norm(torch::tanh(input(x)));
    for (auto& b : *blocks) h = b->as<zero::ShardedImpl>()->forward(h);
    return head(h).squeeze(-1);
  }
};
TORCH_MODULE(TpNet);

// Trains the plain model on the whole global batch; returns its parameters and each step's
// gradient norm (before clipping, as DeepSpeed and clip_grad_norm_ report it).
std::pair<std::map<std::string, torch::Tensor>, std::vector<double>> plain_reference(
    const Case& c, int dp, const Config& config) {
  TpNet net(42, nullptr);
  std::vector<torch::Tensor> params;
  for (auto& p : net->parameters())
    if (p.requires_grad()) params.push_back(p);
  torch::optim::AdamW opt(
      params, torch::optim::AdamWOptions(0.01).betas({0.8, c.beta2}).eps(1e-3).weight_decay(0.05));
  auto schedule = LrSchedule::create(config.scheduler, config.optimizer.lr);
  const int64_t global = c.micro * c.gas * dp;
  std::vector<double> norms;
  for (int step = 0; step < c.steps; ++step) {
    for (auto& g : opt.param_groups()) g.options().set_lr(schedule->lr_at(step));
    opt.zero_grad();
    auto [x, y] = samples(7, step * global, global);
    torch::mse_loss(net->forward(x), y).backward();
    norms.push_back(torch::nn::utils::clip_grad_norm_(params, c.clip > 0 ? c.clip : 1e30));
    opt.step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : net->named_parameters()) out[item.key()] = item.value().detach().clone();
  return {out, norms};
}

// `with_init`: stage 3 only, the blocks partitioned by zero::Init(config, grid) as they are built.
void golden(const std::shared_ptr<Communicator>& world, int tp, bool with_init = false) {
  if (world->world_size() % tp != 0) {
    if (world->rank() == 0)
      std::printf("tp %d does not divide world %d: nothing to run\n", tp, world->world_size());
    return;
  }
  const int w = world->world_size();
  for (int stage = with_init ? 3 : 0; stage <= 3; ++stage) {
    Case c;
    c.stage = stage;
    c.gas = 2;
    c.micro = 1;
    c.clip = 0.05;
    c.steps = 4;
    c.extra_top = zero::detail::str(R"(, "tensor_parallel": {"autotp_size": )", tp, "}");
    const ParsedConfig parsed = parse(  // batch sizes per data rank
        config_json(c, w,
                    stage == 3 ? R"(, "stage3_gather_16bit_weights_on_model_save": true)" : ""),
        w);
    const ParallelGrid grid = parallel_grid(parsed.config, world);
    const int dp = grid.data_size(), d = grid.data_rank();
    EXPECT(parsed.config.train_batch_size == c.micro * c.gas * dp, "train_batch_size ",
           parsed.config.train_batch_size, " at tp ", tp, " x dp ", dp);
    std::optional<Init> init;
    if (with_init) init.emplace(parsed, grid);
    TpNet net(42, grid.tensor_group());
    if (with_init)  // partitioned as built: the blocks' slices hold no memory of their own
      for (const auto& p : net->blocks[0]->parameters())  // (but the persistent: <= 30 elements)
        EXPECT(p.numel() <= 30 || p.storage().nbytes() == 0,
               "zero::Init left a block parameter of ", p.numel(), " elements whole");
    init.reset();
    Engine engine = initialize(net.ptr(), parsed, grid);
    EXPECT(engine.data_parallel_size() == dp && engine.tensor_parallel_size() == tp &&
               engine.world_size() == w,
           "the engine's sizes: dp ", engine.data_parallel_size(), ", tp ",
           engine.tensor_parallel_size(), ", world ", engine.world_size());
    const auto [expected, norms] = plain_reference(c, dp, parsed.config);
    const int64_t global = c.micro * c.gas * dp;
    double worst_norm = 0;
    for (int step = 0; step < c.steps; ++step) {
      for (int m = 0; m < c.gas; ++m) {  // the tensor ranks of a data rank see the same samples
        auto [x, y] = samples(7, step * global + (m * dp + d) * c.micro, c.micro);
        engine.backward(torch::mse_loss(net->forward(x), y));
        engine.step();
      }
      worst_norm =
          std::max(worst_norm, std::abs(engine.last_grad_norm() - norms[step]) / norms[step]);
    }
    EXPECT(worst_norm <= 1e-5, "tp ", tp, " stage ", stage, ": gradient norm differs from the ",
           "plain model's by ", worst_norm, " (relative)");
    double worst = 0;
    for (const auto& [name, got] : engine.full_parameters()) {
      EXPECT(expected.count(name), "no reference for ", name);  // both nets wrap in Sharded
      if (expected.count(name)) worst = std::max(worst, rel_diff(got, expected.at(name)));
    }
    EXPECT(worst <= 1e-5, "tp ", tp, " stage ", stage, ": parameters differ from the plain ",
           "model's by ", worst);
    // The same path on every rank (the job's port); rank 0 writes the whole tensors.
    const std::string dir = zero::detail::str(std::filesystem::temp_directory_path().string(),
                                              "/zero_tp16_", std::getenv("MASTER_PORT"));
    EXPECT(engine.save_16bit_model(dir, "model.safetensors"), "save_16bit_model saved nothing");
    world->barrier()->wait();
    // The whole tensors back into tensor-parallel models (another seed each): before initialize
    // (a plain copy of this rank's slices), and through an engine (masters and shards).
    std::map<std::string, torch::Tensor> saved;
    for (const auto& [name, t] : engine.full_parameters()) saved[name] = t;
    for (const bool through_engine : {false, true}) {
      TpNet again(through_engine ? 8 : 9, grid.tensor_group());
      if (!through_engine) load_state_dict(*again, dir + "/model.safetensors");
      Engine e = initialize(again.ptr(), parsed, grid);
      if (through_engine) load_state_dict(*again, dir + "/model.safetensors");
      for (const auto& [name, got] : e.full_parameters())
        EXPECT(torch::equal(got, saved.at(name)), "tp ", tp, " stage ", stage, ": '", name,
               "' loaded by load_state_dict", through_engine ? " through the engine" : "",
               " is not the saved whole tensor's slice");
    }
    world->barrier()->wait();
    if (world->rank() == 0) {
      TpNet reloaded(7, nullptr);  // another seed: every value must come from the file
      load_state_dict(*reloaded, dir + "/model.safetensors");  // strict: every name, once
      double worst_file = 0;
      for (const auto& item : reloaded->named_parameters())
        worst_file = std::max(worst_file, rel_diff(item.value(), expected.at(item.key())));
      EXPECT(worst_file <= 1e-5, "tp ", tp, " stage ", stage, ": save_16bit_model's file ",
             "differs from the plain model by ", worst_file);
      std::filesystem::remove_all(dir);
    }
    if (world->rank() == 0)
      std::printf("tp %d x dp %d stage %d%s: max rel diff %.3g, gradient norm %.3g\n", tp, dp,
                  stage, with_init ? " with zero::Init" : "", worst, worst_norm);
  }
}

// A fused QKV layer (stride 3) alone in the engine: full_parameters undoes the stride, giving
// the whole layer the plain process builds under the same seed.
void strided_whole(const std::shared_ptr<Communicator>& world, int tp) {
  const int w = world->world_size();
  if (w % tp != 0) return;
  Case c;
  c.extra_top = zero::detail::str(R"(, "tensor_parallel": {"autotp_size": )", tp, "}");
  const ParsedConfig parsed = parse(config_json(c, w), w);
  const ParallelGrid grid = parallel_grid(parsed.config, world);
  torch::manual_seed(3);
  torch::nn::Linear plain(kWidth, 3 * kWidth);
  torch::manual_seed(3);
  tp::ColumnParallelLinear qkv(tp::ColumnParallelLinearOptions(kWidth, 3 * kWidth).stride(3),
                               grid.tensor_group());
  // From a ds_config file this time (initialize(model, path, grid)).
  const std::string path =
      zero::detail::str(std::filesystem::temp_directory_path().string(), "/zero_tp_config_",
                        std::getenv("MASTER_PORT"), "_", world->rank(), ".json");
  std::ofstream(path) << config_json(c, w);
  Engine engine = initialize(qkv.ptr(), path, grid);
  std::filesystem::remove(path);
  const auto whole = engine.full_parameters();
  EXPECT(whole.size() == 2, whole.size(), " parameters");
  for (const auto& [name, got] : whole) {
    const torch::Tensor& want = name == "weight" ? plain->weight : plain->bias;
    EXPECT(got.sizes() == want.sizes() && torch::equal(got, want), "tp ", tp, ": the strided ",
           name, " assembled by full_parameters is not the plain layer's");
  }
}

// Checkpoints across grids (world 4, the same global batch of 4 samples everywhere): trained 2
// steps at `from`, saved, loaded into a fresh model at each of `to` (another tp degree, data
// size and stage), trained 2 more steps: the parameters equal the plain process's after 4.
struct GridCase {
  int tp, stage;
  int world = 4;  // 2: on ranks 0 and 1 only (a smaller job loading the checkpoint)
};

// One engine at `g` on `world`: a model of `seed`, its config (gas = 4 / dp), its grid.
struct TpRun {
  ParsedConfig parsed;
  std::optional<ParallelGrid> grid;
  TpNet net{nullptr};
  std::optional<Engine> engine;
  Case c;
  static constexpr const char* kFrozen = "blocks.0.inner.col.weight";  // with `freeze`
  TpRun(const std::shared_ptr<Communicator>& world, GridCase g, int64_t seed, bool freeze = false) {
    const int w = world->world_size();
    c.stage = g.stage;
    c.micro = 1;
    c.gas = 4 / (w / g.tp);
    c.clip = 0.05;
    c.steps = 4;
    c.extra_top = zero::detail::str(R"(, "tensor_parallel": {"autotp_size": )", g.tp, "}");
    parsed = parse(config_json(c, w), w);
    grid.emplace(parallel_grid(parsed.config, world));
    net = TpNet(seed, grid->tensor_group());
    if (freeze) net->named_parameters()[kFrozen].set_requires_grad(false);
    engine.emplace(initialize(net.ptr(), parsed, *grid));
  }
  void train(int first, int count) {
    const int dp = grid->data_size(), d = grid->data_rank();
    const int64_t global = c.micro * c.gas * dp;
    for (int step = first; step < first + count; ++step)
      for (int m = 0; m < c.gas; ++m) {
        auto [x, y] = samples(7, step * global + (m * dp + d) * c.micro, c.micro);
        engine->backward(torch::mse_loss(net->forward(x), y));
        engine->step();
      }
  }
};

void checkpoint_grids(const std::shared_ptr<Communicator>& world) {
  if (world->world_size() != 4) {
    if (world->rank() == 0) std::printf("checkpoint_grids runs at world 4 only\n");
    return;
  }
  const std::string dir = zero::detail::str(std::filesystem::temp_directory_path().string(),
                                            "/zero_tpckpt_", std::getenv("MASTER_PORT"));
  Case ref_case;
  ref_case.micro = 1;
  ref_case.gas = 4;
  ref_case.clip = 0.05;
  ref_case.steps = 4;
  const auto [expected, norms] =
      plain_reference(ref_case, 1, parse(config_json(ref_case, 1), 1).config);
  const std::vector<std::pair<GridCase, std::vector<GridCase>>> plan = {
      // the same grid, and resharded over tp, data size and stage
      {{2, 3}, {{2, 3}, {1, 1}, {1, 1, 2}, {4, 0}}},
      {{4, 0}, {{2, 3}}},  // and back
  };
  for (const auto& [from, targets] : plan) {
    {
      TpRun saver(world, from, 42);
      saver.train(0, 2);
      saver.engine->save_checkpoint(dir, "tp");
    }
    for (const GridCase& to : targets) {
      // new_group is collective over the world: every rank makes it, ranks 2 and 3 get nullptr.
      const std::shared_ptr<Communicator> job = to.world == 4 ? world : world->new_group({0, 1});
      if (!job) continue;
      TpRun loader(job, to, 1000 + to.tp);  // another seed: every value from the checkpoint
      const auto loaded = loader.engine->load_checkpoint(dir, "tp");
      EXPECT(loaded.has_value(), "no checkpoint loaded");
      EXPECT(loader.engine->global_steps() == 2, "global steps ", loader.engine->global_steps());
      loader.train(2, 2);
      double worst = 0;
      for (const auto& [name, got] : loader.engine->full_parameters())
        worst = std::max(worst, rel_diff(got, expected.at(name)));
      EXPECT(worst <= 1e-5, "saved at tp ", from.tp, " stage ", from.stage, ", loaded at tp ",
             to.tp, " world ", to.world, " stage ", to.stage,
             ": parameters differ from the plain model's by ", worst);
      if (world->rank() == 0)
        std::printf(
            "checkpoint (tp %d, dp %d, stage %d) -> (tp %d, dp %d, stage %d): max rel "
            "diff %.3g\n",
            from.tp, 4 / from.tp, from.stage, to.tp, to.world / to.tp, to.stage, worst);
    }
    world->barrier()->wait();
    if (world->rank() == 0) std::filesystem::remove_all(dir);
  }
  // A frozen tensor-parallel slice is saved whole and cut into the loading grid's slices.
  {
    TpRun saver(world, {2, 3}, 42, /*freeze=*/true);
    saver.train(0, 1);
    saver.engine->save_checkpoint(dir, "frozen");
    EXPECT(saver.engine->save_16bit_model(dir, "frozen.safetensors"), "nothing saved");
  }
  const torch::Tensor whole = TpNet(42, nullptr)->named_parameters()[TpRun::kFrozen];
  if (world->rank() == 0) {  // save_16bit_model wrote the frozen parameter whole too
    TpNet plain(5, nullptr);
    load_state_dict(*plain, dir + "/frozen.safetensors");
    EXPECT(torch::equal(plain->named_parameters()[TpRun::kFrozen], whole),
           "save_16bit_model's frozen split parameter is not the whole tensor");
  }
  for (const GridCase& to : std::vector<GridCase>{{4, 0}, {1, 1, 2}, {2, 3}}) {
    const std::shared_ptr<Communicator> job = to.world == 4 ? world : world->new_group({0, 1});
    if (!job) continue;
    TpRun loader(job, to, 7, /*freeze=*/true);
    loader.engine->load_checkpoint(dir, "frozen");
    const int r = loader.grid->tensor_rank();
    EXPECT(torch::equal(loader.net->named_parameters()[TpRun::kFrozen],
                        tp::slice_of_whole(whole, 0, 1, r, to.tp)),
           "the frozen slice loaded at tp ", to.tp, " is not tensor rank ", r,
           "'s part of the whole");
    loader.train(1, 1);
  }
  world->barrier()->wait();
  if (world->rank() == 0) {
    std::printf("checkpoint with a frozen split parameter: loaded at tp 4, 1 and 2\n");
    std::filesystem::remove_all(dir);
  }
}

void baduse(const std::shared_ptr<Communicator>& world) {
  const int w = world->world_size();
  const int tp = w % 2 == 0 ? 2 : 1;
  Case plain;
  Case split = plain;
  split.extra_top = zero::detail::str(R"(, "tensor_parallel": {"autotp_size": )", tp, "}");
  const ParsedConfig parsed = parse(config_json(split, w), w);
  const ParallelGrid grid = parallel_grid(parsed.config, world);
  if (w % 2 == 0) {  // the config's pipeline section parses; the engine refuses to train it
    Case piped = plain;
    piped.micro = 1;
    piped.extra_top = R"(, "pipeline": {"stages": 2})";
    expect_throw<UsageError>("pipeline stages without a grid",
                             "the zero::pipe::PipelineModule on it", [&] {
                               Net net(42);
                               initialize(net.ptr(), parse(config_json(piped, w), w), world);
                             });
  }
  if (tp > 1) {
    expect_throw<UsageError>("tp layers without the grid", "pass the ParallelGrid", [&] {
      TpNet net(42, grid.tensor_group());
      initialize(net.ptr(), parse(config_json(plain, w), w), world);
    });
    expect_throw<UsageError>("autotp_size without the grid", "build the grid", [&] {
      Net net(42);
      initialize(net.ptr(), parsed, world);
    });
    expect_throw<ConfigError>("autotp_size not the grid's", "autotp_size is 1 but the grid", [&] {
      TpNet net(42, grid.tensor_group());
      initialize(net.ptr(), parse(config_json(plain, w), w), grid);
    });
    expect_throw<UsageError>("zero::Init without the grid", "pass the grid the engine", [&] {
      Case s3 = split;
      s3.stage = 3;
      Init init(parse(config_json(s3, w), w));
    });
    expect_throw<ConfigError>("autotp_size not dividing the world", "does not divide", [&] {
      Case odd = plain;
      odd.extra_top = zero::detail::str(R"(, "tensor_parallel": {"autotp_size": )", w + 1, "}");
      parse(config_json(odd, w), w);
    });
  }
  std::vector<int> everyone(w);
  for (int r = 0; r < w; ++r) everyone[r] = r;
  const std::shared_ptr<Communicator> other = world->new_group(everyone);  // not the grid's
  expect_throw<UsageError>("a layer on another group", "another communicator", [&] {
    TpNet net(42, other);
    initialize(net.ptr(), parsed, grid);
  });
  if (tp > 1) {  // tensor ranks that built different models: refused on every rank, no hang
    expect_throw<UsageError>("tensor ranks with other shapes", "differs from rank 0", [&] {
      TpNet net(42, grid.tensor_group());
      if (grid.tensor_rank() == 1) net->register_module("extra", torch::nn::Linear(2, 2));
      initialize(net.ptr(), parsed, grid);
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"tp2",
                       [](const auto& comm) {
                         strided_whole(comm, 2);
                         golden(comm, 2);
                       }},
                      {"tp4",
                       [](const auto& comm) {
                         strided_whole(comm, 4);
                         golden(comm, 4);
                       }},
                      {"init", [](const auto& comm) { golden(comm, 2, /*with_init=*/true); }},
                      {"ckpt", checkpoint_grids},
                      {"baduse", baduse}});
}
