// The multi-rank mixed precision test program, started by zerorun on 1-4 ranks:
// `--suite scaler`: fp16 loss scaling and bf16 overflow skipping end to end, with inf gradients
// injected on one rank at chosen steps (and on one pipeline stage); `--suite bf16`: bf16/fp16
// training against fp32 (the test nets, the example GPT), DeepSpeed's averaging options, and the
// 2+2+12 bytes of ZeRO.
#include "worker_util.h"

#include <zero/core/loss_scaler.h>
#include <zero/engine/lr_schedule.h>
#include <zero/engine/pipe/module.h>

#include <data.h>
#include <model.h>

#include <limits>
#include <set>
#include <vector>

using namespace zero;
using namespace zero::test;

namespace {

const char* kFp16Dynamic =
    R"(, "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 8, "loss_scale_window": 3, "hysteresis": 2, "min_loss_scale": 1})";
const char* kBf16 = R"(, "bf16": {"enabled": true})";

// The output's gradient becomes inf on this rank: every parameter gradient upstream is inf or
// NaN while the loss itself stays finite (an overflow in backward, as fp16 produces).
torch::Tensor poisoned(torch::Tensor out, bool poison) {
  if (poison)
    out.register_hook([](const torch::Tensor& g) {
      return torch::full_like(g, std::numeric_limits<double>::infinity());
    });
  return out;
}

// One micro-batch's loss for either test net (inputs in the parameters' dtype, loss in fp32).
template <typename Model>
torch::Tensor net_loss(Model& net, const torch::Tensor& x, const torch::Tensor& y, bool poison) {
  const auto dtype = net->input->weight.scalar_type();
  return torch::mse_loss(poisoned(net->forward(x.to(dtype)), poison).to(torch::kFloat), y);
}

bool all_equal(const Params& a, const Params& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i].second, b[i].second)) return false;
  return a.size() == b.size();
}

// Trains the given data steps (gas 1); at step indices in `poison`, rank (index % world)
// injects inf gradients. Returns the final parameters.
template <typename Model>
Params train_steps(Engine& engine, Model& net, const std::vector<int>& data_steps,
                   const std::set<int>& poison, int64_t micro,
                   const std::function<void(int)>& after_step = {}) {
  const int world = engine.world_size(), rank = engine.rank();
  for (size_t i = 0; i < data_steps.size(); ++i) {
    auto [x, y] = samples(7, data_steps[i] * micro * world + rank * micro, micro);
    const bool poison_here = poison.count(static_cast<int>(i)) && rank == i % world;
    engine.backward(net_loss(net, x, y, poison_here));
    engine.step();
    if (after_step) after_step(static_cast<int>(i));
  }
  return engine.full_parameters();
}

// fp16, dynamic scale 2^8, window 3, hysteresis 2, inf injected at steps 2, 3 and 7: the
// scale follows DeepSpeed's update_scale (worked out below), skipped steps leave parameters,
// LR schedule and Adam's step count alone, and the result equals training on the other
// steps' data alone.
void dynamic_scaling(const std::shared_ptr<Communicator>& comm, int stage) {
  const int world = comm->world_size();
  Case c;
  c.stage = stage;
  c.extra_top = kFp16Dynamic;
  c.scheduler =
      R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 8, "warmup_type": "linear"}})";
  const ParsedConfig parsed = parse(config_json(c, world), world);
  auto schedule = LrSchedule::create(parsed.config.scheduler, parsed.config.optimizer.lr);
  // DeepSpeed's update_scale (loss_scaler.py): stable_interval = iter - last_overflow - 1 must
  // be a positive multiple of the window to double, and only a doubling restores hysteresis.
  // iteration: 0, 1 (stable 0, 1)  2 (ovf: hysteresis 2->1)  3 (ovf: 256->128)
  //            4, 5, 6 (stable 0, 1, 2: no doubling yet)  7 (ovf, hysteresis still 1: 128->64)
  //            8, 9 (stable 0, 1)
  const std::vector<double> scale_after = {256, 256, 256, 128, 128, 128, 128, 64, 64, 64};
  const std::set<int> poison = {2, 3, 7};
  const std::vector<int> all_steps = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};

  CastNet net(42);
  Engine engine = initialize(net.ptr(), parsed, comm);
  const std::string name = zero::detail::str("fp16 dynamic stage ", stage);
  EXPECT(engine.loss_scale() == 256, name, ": initial scale ", engine.loss_scale());
  int64_t skipped = 0, applied = 0;
  Params before;
  const Params final_params = train_steps(engine, net, all_steps, poison, c.micro, [&](int step) {
    if (poison.count(step)) {
      ++skipped;
      const Params after = engine.full_parameters();
      EXPECT(all_equal(before, after), name, ": step ", step,
             " was skipped but changed the "
             "parameters");
    } else {
      ++applied;
    }
    EXPECT(engine.loss_scale() == scale_after[step], name, ": scale after step ", step, " is ",
           engine.loss_scale(), ", DeepSpeed's rules give ", scale_after[step]);
    EXPECT(engine.skipped_steps() == skipped, name, ": skipped ", engine.skipped_steps(),
           " after step ", step, ", expected ", skipped);
    EXPECT(engine.global_steps() == step + 1, name, ": global_steps ", engine.global_steps());
    EXPECT(engine.lr() == schedule->lr_at(applied), name, ": lr after step ", step, " is ",
           engine.lr(), ", the schedule at ", applied, " applied steps gives ",
           schedule->lr_at(applied));
    if (poison.count(step + 1)) before = engine.full_parameters();
  });
  // Training on the applied steps' data only, without any overflow: the same parameters up to
  // fp16 rounding (the loss scales differ, by powers of two, so only underflow differs).
  CastNet ref_net(42);
  Engine ref = initialize(ref_net.ptr(), parsed, comm);
  const Params expected = train_steps(ref, ref_net, {0, 1, 4, 5, 6, 8, 9}, {}, c.micro);
  const double d = max_rel_diff(final_params, expected);
  EXPECT(d <= 2e-3, name, ": differs from training without the skipped steps by ", d);
  CastNet initial(42);
  Params initial_params;
  for (const auto& item : initial->named_parameters())
    initial_params.emplace_back(item.key(), item.value());
  EXPECT(max_rel_diff(initial_params, expected) > 0.02, name, ": the reference did not train");
  if (engine.rank() == 0)
    std::printf("scaler world %d %s: scales ok, %lld skipped, vs no-skip run %.3g\n", world,
                name.c_str(), (long long)engine.skipped_steps(), d);
}

// A pipeline layer computing in fp32 from parameters of any dtype; the first layer of the model
// (on pipeline stage 0 only) poisons its output's gradient while `poison_first_layer` is set.
bool poison_first_layer = false;
struct CastLayerImpl : torch::nn::Module {
  torch::nn::Linear fc{nullptr};
  bool first;
  CastLayerImpl(int in, int out, bool first) : first(first) {
    fc = register_module("fc", torch::nn::Linear(in, out));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    const torch::Tensor h = cast_linear(fc, x);
    return first ? poisoned(torch::tanh(h), poison_first_layer) : h.squeeze(-1);
  }
};
TORCH_MODULE(CastLayer);

// fp16 over 2 pipeline stages (x 1 or 2 data ranks): an overflow in stage 0's gradients alone
// skips the step on every stage (the overflow check is the global norm, summed over the world),
// with one loss scale everywhere; the next step trains again.
void pipeline_overflow(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  if (world % 2) return;
  for (const std::string schedule : {"1f1b", "zb-h1"}) {
    Case c;
    c.stage = 1, c.gas = 2;
    c.extra_top = std::string(kFp16Dynamic) + R"(, "pipeline": {"stages": 2, "schedule": ")" +
                  schedule + "\"}";
    const ParsedConfig parsed = parse(config_json(c, world), world);
    const ParallelGrid grid = parallel_grid(parsed.config, comm);
    std::vector<pipe::LayerSpec> layers;
    layers.emplace_back("In", [] { return torch::nn::AnyModule(CastLayer(kIn, kWidth, true)); });
    for (int i = 0; i < 2; ++i)
      layers.emplace_back("Block", [] { return torch::nn::AnyModule(CastBlock(kWidth, kHidden)); });
    layers.emplace_back("Head", [] { return torch::nn::AnyModule(CastLayer(kWidth, 1, false)); });
    pipe::PipelineModule module(grid, layers,
                                pipe::PipelineOptions().partition_method("uniform").loss_fn(
                                    [](const torch::Tensor& out, const torch::Tensor& y) {
                                      return torch::mse_loss(out, y);
                                    }));
    Engine engine = initialize(module.ptr(), parsed, grid);
    const int dp = grid.data_size(), d = grid.data_rank();
    const std::string name = "fp16 pipeline (" + schedule + ")";
    Params before = engine.full_parameters();
    for (int t = 0; t < 3; ++t) {
      poison_first_layer = t == 1;
      int j = 0;
      const double loss = engine.train_batch([&] {
        const int64_t first = ((t * c.gas + j++) * dp + d) * c.micro;
        auto [x, y] = samples(7, first, c.micro);
        return pipe::MicroBatch{x, y};
      });
      EXPECT(std::isfinite(loss), name, ": loss ", loss, " in batch ", t);
      EXPECT(engine.skipped_steps() == (t >= 1 ? 1 : 0), name, ": ", engine.skipped_steps(),
             " skipped after batch ", t, " on pipeline stage ", module->stage());
      at::Tensor scales = at::full({2}, engine.loss_scale(), at::kFloat);
      scales[1] = -engine.loss_scale();
      comm->all_reduce(scales, ReduceOp::kMax)->wait();
      EXPECT(scales[0].item<double>() == -scales[1].item<double>(), name,
             ": the ranks' loss scales differ after batch ", t);
      const Params after = engine.full_parameters();
      EXPECT(all_equal(before, after) == (t == 1), name, ": batch ", t,
             t == 1 ? " overflowed on stage 0 but changed the parameters"
                    : " left the parameters unchanged");
      before = after;
    }
    poison_first_layer = false;
    if (comm->rank() == 0)
      std::printf("%s: an overflow on stage 0 skipped the step on every stage\n", name.c_str());
  }
}

void run_scaler(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  for (int stage = 0; stage <= 3; ++stage) dynamic_scaling(comm, stage);
  pipeline_overflow(comm);

  {  // A static scale never changes; an overflow still skips the step.
    Case c;
    c.stage = 2;
    c.extra_top = R"(, "fp16": {"enabled": true, "loss_scale": 128})";
    CastNet net(42);
    Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
    train_steps(engine, net, {0, 1, 2}, {1}, c.micro);
    EXPECT(engine.loss_scale() == 128, "static scale changed to ", engine.loss_scale());
    EXPECT(engine.skipped_steps() == 1, "static scale: skipped ", engine.skipped_steps());
  }
  {  // Overflow at min_loss_scale: an error on every rank that says so.
    Case c;
    c.stage = 1;
    c.extra_top =
        R"(, "fp16": {"enabled": true, "initial_scale_power": 1, "hysteresis": 1, "min_loss_scale": 1})";
    CastNet net(42);
    Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
    train_steps(engine, net, {0}, {0}, c.micro);
    EXPECT(engine.loss_scale() == 1, "scale 2 halved to ", engine.loss_scale());
    expect_throw<LossScaleError>("overflow at min_loss_scale", "minimum loss scale 1",
                                 [&] { train_steps(engine, net, {1}, {0}, c.micro); });
  }
  {  // bf16 with check_grad_overflow (our default): skipped, parameters untouched, scale 1.
    Case c;
    c.stage = 3;
    c.extra_top = kBf16;
    Net net(42, 2, true);
    Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
    train_steps(engine, net, {0}, {}, c.micro);
    const Params before = engine.full_parameters();
    train_steps(engine, net, {1}, {0}, c.micro);
    EXPECT(engine.skipped_steps() == 1, "bf16: skipped ", engine.skipped_steps());
    EXPECT(engine.loss_scale() == 1, "bf16 has no loss scale");
    EXPECT(all_equal(before, engine.full_parameters()), "bf16: a skipped step changed parameters");
    train_steps(engine, net, {2}, {}, c.micro);
    EXPECT(!all_equal(before, engine.full_parameters()), "bf16: training stopped after a skip");
  }
  {  // bf16 without the check: the NaN update goes through and the next loss is refused.
    Case c;
    c.stage = 2;
    c.extra_top = R"(, "bf16": {"enabled": true, "check_grad_overflow": false})";
    Net net(42, 2, false);
    Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
    train_steps(engine, net, {0}, {0}, c.micro);
    EXPECT(engine.skipped_steps() == 0, "bf16 without check_grad_overflow skipped a step");
    const auto [xs, ys] = samples(7, rank, 1);
    const at::Tensor x = xs, y = ys;  // lambdas capture variables, not bindings (C++17)
    expect_throw<NonFiniteLossError>("bf16 NaN parameters, no check", "bf16 without check_grad",
                                     [&] { engine.backward(net_loss(net, x, y, false)); });
  }
}

// ---------------------------------------------------------------------------------------------

template <typename Model>
Params train_case(const std::shared_ptr<Communicator>& comm, const Case& c, Model net) {
  const int world = comm->world_size();
  Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
  const int64_t global = c.micro * c.gas * world;
  for (int step = 0; step < c.steps; ++step)
    for (int m = 0; m < c.gas; ++m) {
      auto [x, y] = samples(7, step * global + (m * world + engine.rank()) * c.micro, c.micro);
      engine.backward(net_loss(net, x, y, false));
      engine.step();
    }
  return engine.full_parameters();
}

// 16-bit training of the test nets against the same engine in fp32.
void nets_against_fp32(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  struct Variant {
    std::string name, precision;
    int stage;
    double tolerance;
  };
  const std::string bf16 = kBf16;
  const std::vector<Variant> variants = {
      {"bf16 stage 0", bf16, 0, 2e-2},
      {"bf16 stage 1", bf16, 1, 2e-2},
      {"bf16 stage 2", bf16, 2, 2e-2},
      {"bf16 stage 3", bf16, 3, 2e-2},
      {"bf16 stage 2 grad_accum fp32", bf16 + R"(, "data_types": {"grad_accum_dtype": "fp32"})", 2,
       2e-2},
      {"bf16 stage 1 comm fp32", bf16 + R"(, "communication_data_type": "fp32")", 1, 2e-2},
      {"bf16 stage 3 prescale", bf16 + R"(, "prescale_gradients": true)", 3, 2e-2},
      {"bf16 stage 2 predivide 2", bf16 + R"(, "gradient_predivide_factor": 2.0)", 2, 2e-2},
      {"fp32 stage 2 prescale", R"(, "prescale_gradients": true)", 2, 1e-5},
      {"fp32 stage 1 predivide 4", R"(, "gradient_predivide_factor": 4.0)", 1, 1e-5},
      {"fp16 stage 0", kFp16Dynamic, 0, 2e-3},
      {"fp16 stage 2", kFp16Dynamic, 2, 2e-3},
      {"fp16 stage 3 gas 2 clip", kFp16Dynamic, 3, 2e-3},
  };
  for (const Variant& v : variants) {
    Case c;
    c.stage = v.stage;
    if (v.name.find("gas 2") != std::string::npos) {
      c.gas = 2;
      c.clip = 0.05;
      c.micro = 1;
    }
    const bool fp16 = v.precision.find("fp16") != std::string::npos;
    Case full = c;
    full.extra_top = v.precision;
    Params got, expected;
    if (fp16) {
      got = train_case(comm, full, CastNet(42));
      expected = train_case(comm, c, CastNet(42));
    } else {
      got = train_case(comm, full, Net(42, 2, true));
      expected = train_case(comm, c, Net(42, 2, true));
    }
    const double d = max_rel_diff(got, expected);
    EXPECT(d <= v.tolerance, v.name, ": differs from fp32 by ", d, " > ", v.tolerance);
    // The tolerance means something only if training moved the parameters by much more: a
    // 16-bit path that barely updated would otherwise pass.
    Case none = c;
    none.steps = 0;
    const Params initial =
        fp16 ? train_case(comm, none, CastNet(42)) : train_case(comm, none, Net(42, 2, true));
    const double moved = max_rel_diff(expected, initial), moved16 = max_rel_diff(got, initial);
    EXPECT(moved >= 4 * v.tolerance && d <= moved16 / 4, v.name, ": fp32 training moved the ",
           "parameters by ", moved, " and 16-bit by ", moved16, ", against a tolerance of ",
           v.tolerance, " and a difference of ", d);
    if (comm->rank() == 0)
      std::printf(
          "precision world %d %-30s vs fp32: max rel diff %.3g (limit %.0e); training moved "
          "them by %.3g (fp32) and %.3g\n",
          world, v.name.c_str(), d, v.tolerance, moved, moved16);
  }
}

// The example GPT in bf16 against fp32 for stages 0-3: every step's loss within bf16 tolerance,
// and training makes progress.
void gpt_against_fp32(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string text = gpt::read_text_file(ZERO_GPT_DATA);
  const gpt::CharTokenizer tokenizer(text);
  gpt::GptConfig g;
  g.vocab_size = tokenizer.vocab_size();
  g.context = 32;
  g.n_layer = 2;
  g.n_head = 2;
  g.d_model = 32;
  const gpt::TextDataset data(tokenizer.encode(text), g.context, 1234);
  const int steps = 15;
  const int64_t micro = 2;
  auto losses = [&](int stage, const std::string& precision) {
    torch::manual_seed(5);
    gpt::Gpt model(g);
    if (stage == 3)
      model->wrap_blocks(
          [](torch::nn::AnyModule block) { return torch::nn::AnyModule(zero::Sharded(block)); });
    const std::string json = zero::detail::str(
        R"({"train_micro_batch_size_per_gpu": )", micro,
        R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.01}}, "zero_optimization": {"stage": )",
        stage, R"(, "reduce_bucket_size": 5000)",
        stage == 3 ? R"(, "stage3_param_persistence_threshold": 100)" : "", "}", precision, "}");
    Engine engine = initialize(model.ptr(), parse(json, world), comm);
    std::vector<double> out;
    for (int step = 0; step < steps; ++step) {
      const gpt::Batch b = data.batch(step, 0, rank, world, micro, 1);
      const torch::Tensor loss = model->loss(b.tokens, b.targets);
      out.push_back(loss.item<double>());
      engine.backward(loss);
      engine.step();
    }
    return out;
  };
  for (int stage = 0; stage <= 3; ++stage) {
    const std::vector<double> fp32 = losses(stage, "");
    const std::vector<double> bf16 = losses(stage, kBf16);
    double worst = 0;
    for (int s = 0; s < steps; ++s) {
      const double rel = std::abs(bf16[s] - fp32[s]) / fp32[s];  // measured <= 4e-4
      worst = std::max(worst, rel);
      EXPECT(rel <= 5e-3, "GPT stage ", stage, " step ", s, ": bf16 loss ", bf16[s], " vs fp32 ",
             fp32[s]);
    }
    EXPECT(bf16.back() < 0.9 * bf16.front(), "GPT stage ", stage, ": bf16 loss ", bf16.front(),
           " -> ", bf16.back(), " did not fall");
    if (rank == 0)
      std::printf(
          "gpt world %d stage %d: loss fp32 %.4f -> %.4f, bf16 %.4f -> %.4f, worst step "
          "rel diff %.3g\n",
          world, stage, fp32.front(), fp32.back(), bf16.front(), bf16.back(), worst);
  }
}

// ZeRO's 2 + 2 + 12 bytes per parameter in bf16: per-rank model states against the formula.
void bf16_memory(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size();
  int64_t psi = 0;
  for (auto& p : Net(42, 4, true)->parameters()) psi += p.numel();
  for (int stage = 0; stage <= 3; ++stage) {
    for (bool fp32_grads : {false, true}) {
      if (fp32_grads && stage != 2) continue;
      Case c;
      c.stage = stage;
      c.bucket = 2000;
      c.steps = 1;
      c.extra_top = std::string(kBf16) +
                    (fp32_grads ? R"(, "data_types": {"grad_accum_dtype": "fp32"})" : "");
      ParsedConfig parsed = parse(config_json(c, world), world);
      parsed.config.zero_optimization.stage3_param_persistence_threshold = 0;
      Net net(42, 4, true);
      Engine engine = initialize(net.ptr(), parsed, comm);
      const MemoryReport m = engine.memory_report();
      // bf16 at stage 0 accumulates gradients in fp32 by default, as DeepSpeed does.
      const int64_t grad_bytes = fp32_grads || stage == 0 ? 4 : 2;
      const int64_t params = stage == 3 ? 2 * psi / world : 2 * psi;
      const int64_t grads = stage <= 1 ? grad_bytes * psi : grad_bytes * psi / world;
      const int64_t master = stage == 0 ? 4 * psi : 4 * psi / world;
      const int64_t optimizer = stage == 0 ? 8 * psi : 8 * psi / world;
      const int64_t formula = params + grads + master + optimizer;
      const int64_t slack = 16 * 1024;  // padding to world * 16 bytes per group
      EXPECT(m.model_states_bytes() >= formula && m.model_states_bytes() <= formula + slack,
             "bf16 stage ", stage, fp32_grads ? " fp32 grads" : "", ": ", m.to_string(),
             " vs formula ", formula);
      EXPECT(m.master_params_bytes >= master && m.master_params_bytes <= master + slack,
             "bf16 stage ", stage, ": master ", m.master_params_bytes, " vs ", master);
      if (comm->rank() == 0)
        std::printf("memory world %d bf16 stage %d%s: model states %lld B, formula %lld B\n", world,
                    stage, fp32_grads ? " (fp32 grads)" : "", (long long)m.model_states_bytes(),
                    (long long)formula);
    }
  }
}

void run_bf16(const std::shared_ptr<Communicator>& comm) {
  bf16_memory(comm);
  nets_against_fp32(comm);
  gpt_against_fp32(comm);
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv, {{"scaler", run_scaler}, {"bf16", run_bf16}});
}
