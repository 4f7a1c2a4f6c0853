// The multi-rank engine test program, started by zerorun on 1-4 ranks: `--suite golden`
// (engine vs one plain LibTorch process), `--suite memory` and `--suite baduse`.
#include "worker_util.h"

#include <zero/comm/process_group.h>
#include <zero/engine/engine.h>
#include <zero/engine/lr_schedule.h>

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <string>

using namespace zero;
using namespace zero::test;

namespace {

void run_golden(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  std::vector<Case> cases;
  for (int stage = 0; stage <= 3; ++stage) {
    Case plain;
    plain.stage = stage;
    cases.push_back(plain);
    Case acc = plain;
    acc.gas = 2;
    acc.clip = 0.05;
    acc.micro = 1;
    cases.push_back(acc);
  }
  Case sgd;
  sgd.stage = 2;
  sgd.optimizer = "SGD";
  sgd.gas = 3;
  cases.push_back(sgd);
  Case adam;
  adam.stage = 1;
  adam.optimizer = "Adam";
  adam.clip = 0.05;
  cases.push_back(adam);
  Case big;
  big.stage = 3;
  big.bucket = 100000;
  big.overlap = false;
  big.gas = 2;
  cases.push_back(big);
  Case big2;
  big2.stage = 2;
  big2.bucket = 100000;
  big2.overlap = false;
  cases.push_back(big2);
  // OneCycle with cycle_momentum: AdamW's betas follow the cycle (beta2 becomes 0.99, as in
  // DeepSpeed); SGD's momentum stays (DeepSpeed disables cycling without betas).
  Case cycle;
  cycle.stage = 2;
  cycle.gas = 2;
  cycle.micro = 1;
  cycle.steps = 5;
  cycle.beta2 = 0.999;
  cycle.scheduler =
      R"({"type": "OneCycle", "params": {"cycle_min_lr": 0.002, "cycle_max_lr": 0.01, "cycle_first_step_size": 2, "cycle_min_mom": 0.6, "cycle_max_mom": 0.95}})";
  cases.push_back(cycle);
  Case cycle_sgd = cycle;
  cycle_sgd.stage = 1;
  cycle_sgd.optimizer = "SGD";
  cases.push_back(cycle_sgd);
  // Stage 3 with block 0 run twice per forward: kept between its uses (a large
  // stage3_max_reuse_distance) or released and gathered again (0).
  Case reuse_far;
  reuse_far.stage = 3;
  reuse_far.reuse_block = true;
  reuse_far.max_reuse_distance = 1000000000;
  reuse_far.gas = 2;
  reuse_far.micro = 1;
  cases.push_back(reuse_far);
  Case reuse_none = reuse_far;
  reuse_none.max_reuse_distance = 0;
  cases.push_back(reuse_none);
  // host_shared_params: one parameter copy the ranks share (on shared memory; over TCP the
  // stages run as without it). Each must end bitwise equal to its case without sharing.
  for (int stage = 1; stage <= 3; ++stage) {
    Case shared;
    shared.stage = stage;
    shared.gas = stage == 2 ? 1 : 2;
    shared.clip = stage == 2 ? 0 : 0.05;
    shared.micro = stage == 2 ? 2 : 1;
    shared.host_shared = true;
    cases.push_back(shared);
  }
  std::map<int64_t, int64_t> gathers_by_distance;
  const bool shares = world > 1 && std::string(comm->transport()) == "shm";
  for (const Case& c : cases) {
    const std::string name = zero::detail::str(
        "stage ", c.stage, " gas ", c.gas, " clip ", c.clip, " ", c.optimizer, " bucket ", c.bucket,
        c.overlap ? "" : " no-overlap", c.scheduler.empty() ? "" : " OneCycle",
        c.reuse_block ? zero::detail::str(" reuse dist ", c.max_reuse_distance) : "",
        c.host_shared ? " host-shared" : "");
    ParsedConfig parsed = parse(config_json(c, world), world);
    Net net(42, 2, /*wrap=*/true, c.reuse_block);
    Engine engine = initialize(net.ptr(), parsed, comm);
    train(engine, net, c, world, rank);
    if (c.reuse_block)
      gathers_by_distance[c.max_reuse_distance] = engine.memory_report().unit_gathers;
    if (c.host_shared) {
      Case own = c;
      own.host_shared = false;
      Net own_net(42, 2, /*wrap=*/true);
      Engine own_engine = initialize(own_net.ptr(), parse(config_json(own, world), world), comm);
      train(own_engine, own_net, own, world, rank);
      EXPECT(bitwise_equal(engine.full_parameters(), own_engine.full_parameters()), name,
             ": not bitwise equal to the same case with a parameter copy per rank");
      const MemoryReport shared_mem = engine.memory_report(), own_mem = own_engine.memory_report();
      if (c.stage == 3)
        EXPECT((shared_mem.unit_gathers == 0) == shares, name, ": ", shared_mem.unit_gathers,
               " unit gathers on transport ", comm->transport());
      // This rank's share of the one copy: 1/world of the parameters (stages 1-2 keep them all;
      // stage 3 its shards and the persistent ones whole); and no gather staging at stages 1-2
      // (at stage 3, where the step ends with the next blocks gathered, no more than with gathers).
      if (shares) {
        EXPECT(c.stage == 3 ? shared_mem.parameters_bytes <= own_mem.parameters_bytes
                            : shared_mem.parameters_bytes * world <= own_mem.parameters_bytes,
               name, ": parameters ", shared_mem.parameters_bytes, " bytes vs ",
               own_mem.parameters_bytes);
        EXPECT(shared_mem.kept_params_bytes == 0, name, ": ", shared_mem.kept_params_bytes,
               " B kept for gathers");
        EXPECT(c.stage == 3 ? shared_mem.comm_buffers_bytes <= own_mem.comm_buffers_bytes
                            : shared_mem.comm_buffers_bytes < own_mem.comm_buffers_bytes,
               name, ": comm buffers ", shared_mem.comm_buffers_bytes, " bytes vs ",
               own_mem.comm_buffers_bytes);
      }
    }
    if (c.clip > 0)
      EXPECT(engine.last_grad_norm() > c.clip, name, ": clipping never engaged (norm ",
             engine.last_grad_norm(), ")");
    auto expected = reference(c, world, parsed.config);
    // Relative to the parameter's scale: the larger of its final and initial norms. A parameter
    // that training drives near zero (the 1-element head bias ends at ~3e-4 in the SGD OneCycle
    // case, from ~0.1) would otherwise turn fp32 rounding (~4e-9) into a large "relative" error.
    Net start(42, 2, /*wrap=*/true, c.reuse_block);
    std::map<std::string, torch::Tensor> initial_values;
    for (const auto& item : start->named_parameters()) initial_values[item.key()] = item.value();
    double worst = 0;
    for (const auto& [pname, value] : engine.full_parameters()) {
      auto it = expected.find(pname);
      EXPECT(it != expected.end(), name, ": unknown parameter ", pname);
      if (it == expected.end()) continue;
      const double scale = std::max(it->second.norm().item<double>(),
                                    initial_values.at(pname).norm().item<double>());
      const double d = (value - it->second).norm().item<double>() / std::max(scale, 1e-12);
      worst = std::max(worst, d);
      EXPECT(d <= 1e-5, name, ": ", pname, " relative difference ", d, " (norm ",
             it->second.norm().item<double>(), ", difference norm ",
             (value - it->second).norm().item<double>(), ")");
    }
    // The parameters moved at all (the comparison is not vacuous).
    Net initial(42, 2, true);
    EXPECT(rel_diff(initial->input->weight, expected["input.weight"]) > 1e-4, name,
           ": reference did not train");
    if (rank == 0)
      std::printf("golden world %d %-58s max rel diff %.3g\n", world, name.c_str(), worst);
  }
  const int64_t far = gathers_by_distance[1000000000], none = gathers_by_distance[0];
  EXPECT(none > far && far > 0, "reuse distance 0 must gather the reused block more often: ", none,
         " vs ", far, " unit gathers");
  if (rank == 0)
    std::printf("golden world %d stage 3 unit gathers: reuse distance 0: %lld, 1e9: %lld\n", world,
                (long long)none, (long long)far);
}

int64_t formula_bytes(int stage, int64_t psi, int world) {
  switch (stage) {
    case 0:
      return 16 * psi;
    case 1:
      return 8 * psi + 8 * psi / world;
    case 2:
      return 4 * psi + 12 * psi / world;
    default:
      return 16 * psi / world;
  }
}

void run_memory(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  int64_t psi = 0;
  {
    Net probe(42, 4, true);
    for (auto& p : probe->parameters()) psi += p.numel();
  }
  for (int stage = 0; stage <= 3; ++stage) {
    Case c;
    c.stage = stage;
    c.bucket = 2000;
    c.steps = 2;
    const std::string zero_extra = ", \"stage3_prefetch_bucket_size\": 100000";
    ParsedConfig parsed = parse(config_json(c, world, zero_extra), world);
    parsed.config.zero_optimization.stage3_param_persistence_threshold = 0;
    Net net(42, 4, true);
    Engine engine = initialize(net.ptr(), parsed, comm);
    train(engine, net, c, world, rank);
    const MemoryReport m = engine.memory_report();
    const int64_t formula = formula_bytes(stage, psi, world);
    const int64_t slack = 2 * c.bucket * 4;  // reduce + all-gather bucket bytes
    EXPECT(m.model_states_bytes() >= formula, "stage ", stage, ": ", m.to_string(), " < formula ",
           formula);
    EXPECT(m.model_states_bytes() <= formula + slack, "stage ", stage, ": ", m.to_string(),
           " > formula ", formula, " + ", slack);
    EXPECT(m.optimizer_states_bytes > 0, "stage ", stage);
    // Two staging slots of a bucket and the publishing all-gather's bucket (stages 1-2), whatever
    // the bucket count: the first backward once held every bucket in a staging buffer of its own
    // (at stage 3 behind the rest of the model's bucket, whose input layer's gradient comes last).
    if (stage >= 1)
      EXPECT(m.comm_buffers_bytes <= 3 * c.bucket * 4, "stage ", stage, ": comm buffers ",
             m.comm_buffers_bytes, " B for buckets of ", c.bucket, " elements (",
             (psi + c.bucket - 1) / c.bucket, " buckets)");
    // And already in the first step, whose backward does not know the launch order yet: each
    // bucket launches when its last gradient is expected (in layout order, every block's bucket
    // once waited behind the rest of the model's in a staging buffer of its own, until the
    // second backward freed them).
    if (stage >= 1) {
      Case first = c;
      first.steps = 1;
      Net fresh(42, 4, true);
      Engine one_step = initialize(fresh.ptr(), parsed, comm);
      train(one_step, fresh, first, world, rank);
      const int64_t staged = one_step.memory_report().comm_buffers_bytes;
      EXPECT(staged <= 3 * c.bucket * 4, "stage ", stage, ": comm buffers after the first step ",
             staged, " B for buckets of ", c.bucket, " elements");
    }
    if (rank == 0)
      std::printf(
          "memory world %d stage %d psi %lld: model states %lld B, ZeRO fp32 formula %lld B, comm "
          "buffers %lld B, peak gathered %lld B\n",
          world, stage, (long long)psi, (long long)m.model_states_bytes(), (long long)formula,
          (long long)m.comm_buffers_bytes, (long long)m.peak_gathered_params_bytes);
  }
  // Stage 3 with stage3_max_live_parameters: the rest unit plus one block fit, two do not.
  Net probe(42, 4, true);
  int64_t block_numel = 0, total = 0;
  for (auto& p : probe->blocks[0]->parameters()) block_numel += p.numel();
  for (auto& p : probe->parameters()) total += p.numel();
  const int64_t rest = total - 4 * block_numel;
  int64_t tight_kept_bytes = 0;
  for (int64_t max_live : {rest + block_numel + 64 * world, int64_t(1000000000)}) {
    Case c;
    c.stage = 3;
    c.steps = 2;
    const std::string extra = zero::detail::str(", \"stage3_max_live_parameters\": ", max_live,
                                                ", \"stage3_prefetch_bucket_size\": 1000000");
    ParsedConfig parsed = parse(config_json(c, world, extra), world);
    parsed.config.zero_optimization.stage3_param_persistence_threshold = 0;
    Net net(42, 4, true);
    Engine engine = initialize(net.ptr(), parsed, comm);
    const MemoryReport m0 = engine.memory_report();
    train(engine, net, c, world, rank);
    const MemoryReport m = engine.memory_report();
    // setup() gathered every block at once; none of that memory is kept for later gathers.
    EXPECT(m0.kept_params_bytes == 0, "after initialize: ", m0.kept_params_bytes,
           " B kept for gathers");
    if (max_live < 1000000000) {
      tight_kept_bytes = m.kept_params_bytes;
      // Nor does gathering the whole model for the caller (as loading a checkpoint does).
      engine.full_parameters();
      const int64_t after_full = engine.memory_report().kept_params_bytes;
      EXPECT(after_full <= tight_kept_bytes, after_full,
             " B kept for gathers after full_parameters, ", tight_kept_bytes, " B before");
      EXPECT(m.peak_gathered_params_bytes <= 4 * max_live, "peak gathered ",
             m.peak_gathered_params_bytes, " B > stage3_max_live_parameters ", max_live,
             " elements");
    } else {
      EXPECT(m.peak_gathered_params_bytes > 4 * (rest + block_numel + 64 * world),
             "prefetch never held two blocks: ", m.peak_gathered_params_bytes);
      // A tighter stage3_max_live_parameters keeps no more memory for the next gathers than this
      // run (it kept a block more when initialize's releases were kept).
      EXPECT(tight_kept_bytes <= m.kept_params_bytes, tight_kept_bytes,
             " B kept for gathers with one block live, ", m.kept_params_bytes, " B with all");
      // The step ends by starting the next forward's first gathers (the rest of the model is
      // gathered anyway): more than the rest is gathered between steps.
      EXPECT(m.gathered_params_bytes >= 4 * (rest + block_numel),
             "no block gathered after the step: ", m.gathered_params_bytes, " B");
    }
    if (rank == 0)
      std::printf("memory world %d stage 3 max_live %lld elements: peak gathered %lld B\n", world,
                  (long long)max_live, (long long)m.peak_gathered_params_bytes);
  }
}

// A Block with a third Linear, "spare", whose output the forward adds times `use` (see
// train_with_spare): a data-dependent layer inside a wrapped block.
struct SpareBlockImpl : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, spare{nullptr};
  int use = 1;
  SpareBlockImpl() {
    fc1 = register_module("fc1", torch::nn::Linear(kWidth, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kWidth));
    spare = register_module("spare", torch::nn::Linear(kWidth, kWidth));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    torch::Tensor out = x + fc2(torch::tanh(fc1(x)));
    return use >= 0 ? out + use * spare(x) : out;
  }
};
TORCH_MODULE(SpareBlock);

// Where train_with_spare puts its spare layer.
enum class SpareAt {
  kTop,         // beside the blocks, in the rest of the model
  kInnerBlock,  // inside the third of four wrapped blocks (backward gathers two after it)
};

// A Net with one more Linear, "spare", that the loss uses when `use_spare(step, micro)` says 1,
// multiplies by zero when it says 0 (a zero gradient, every hook fires) and leaves out when it
// says -1 (no gradient, no hook); trains `steps` steps of Case `c`. Returns the parameters after
// training, with global_steps() as the last entry's value.
Params train_with_spare(const std::shared_ptr<Communicator>& comm, const Case& c,
                        const std::string& extra_zero,
                        const std::function<int(int, int)>& use_spare, int steps,
                        SpareAt at = SpareAt::kTop) {
  const int world = comm->world_size(), rank = comm->rank();
  Net net(1, at == SpareAt::kTop ? 2 : 0);
  torch::nn::Linear spare{nullptr};
  SpareBlock inner{nullptr};
  if (at == SpareAt::kTop) {
    spare = net->register_module("spare", torch::nn::Linear(kIn, 1));
  } else {
    for (int i = 0; i < 4; ++i) {
      if (i == 2) {
        inner = SpareBlock();
        net->blocks->push_back(zero::Sharded(inner));
      } else {
        net->blocks->push_back(zero::Sharded(Block(kWidth, kHidden)));
      }
    }
  }
  Engine engine = initialize(net.ptr(), parse(config_json(c, world, extra_zero), world), comm);
  for (int step = 0; step < steps; ++step)
    for (int m = 0; m < c.gas; ++m) {
      auto [x, y] = samples(5, ((step * c.gas + m) * world + rank) * c.micro, c.micro);
      const int use = use_spare(step, m);
      if (inner) inner->use = use;
      torch::Tensor out = net->forward(x);
      if (spare && use >= 0) out = out + use * spare(x).squeeze(-1);
      engine.backward(torch::mse_loss(out, y));
      engine.step();
    }
  Params out = engine.full_parameters();
  out.emplace_back("global_steps", torch::tensor(engine.global_steps()));
  return out;
}

int64_t steps_of(const Params& p) {
  return p.back().second.item<int64_t>();
}

// ignore_unused_parameters: false stops the step on every rank when a trainable parameter got
// no gradient in the whole accumulation window on some rank, naming it where it happened; true
// (the default) counts the missing gradient as zeros, also when only some ranks lack it.
void unused_parameters(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string strict = R"(, "ignore_unused_parameters": false)";
  for (int stage = 0; stage <= 3; ++stage) {
    Case c;
    c.stage = stage;
    c.gas = 2;
    c.micro = 1;
    EXPECT(steps_of(train_with_spare(
               comm, c, strict, [](int, int m) { return m == 1 ? 1 : -1; }, 2)) == 2,
           "stage ", stage, ": a parameter used in one micro-step of each window was refused");
    EXPECT(steps_of(train_with_spare(
               comm, c, "", [](int, int) { return -1; }, 2)) == 2,
           "stage ", stage,
           ": ignore_unused_parameters true (the default) refused an unused parameter");
    // Used on some ranks only: the same model as a zero gradient there, bit for bit (each rank's
    // buckets are reduced in one agreed order, however its gradients arrive).
    auto last_rank = [&](int zero_or_skip) {
      return [&, zero_or_skip](int, int) { return rank == world - 1 ? zero_or_skip : 1; };
    };
    const Params skipped = train_with_spare(comm, c, "", last_rank(-1), 2);
    const Params zeroed = train_with_spare(comm, c, "", last_rank(0), 2);
    EXPECT(bitwise_equal(skipped, zeroed), "stage ", stage, ": a parameter unused on rank ",
           world - 1,
           " only trains differently from a zero "
           "gradient there (max rel diff ",
           max_rel_diff(skipped, zeroed), ")");
    // The same inside a wrapped block with more blocks after it, which stage 3 gathers again in
    // backward (stage3_max_reuse_distance 0), each when backward reaches it (no prefetch), while
    // the block's buckets are reduced: the bucket fills at a different point on the rank without
    // the gradient.
    Case inner = c;
    inner.max_reuse_distance = 0;
    const std::string no_prefetch =
        stage == 3 ? R"(, "stage3_prefetch_bucket_size": 0)" : std::string();
    const Params skipped_inner =
        train_with_spare(comm, inner, no_prefetch, last_rank(-1), 2, SpareAt::kInnerBlock);
    const Params zeroed_inner =
        train_with_spare(comm, inner, no_prefetch, last_rank(0), 2, SpareAt::kInnerBlock);
    EXPECT(bitwise_equal(skipped_inner, zeroed_inner), "stage ", stage,
           ": a layer of a wrapped block unused on rank ", world - 1,
           " only trains differently from a zero gradient there (max rel diff ",
           max_rel_diff(skipped_inner, zeroed_inner), ")");
    const std::string needle = rank == world - 1
                                   ? "2 trainable parameter(s) got no gradient on rank " +
                                         std::to_string(rank) + " since the last step: 'spare."
                                   : "rank(s) " + std::to_string(world - 1) + " (2)";
    expect_throw<UsageError>(zero::detail::str("unused parameter, stage ", stage), needle,
                             [&] { train_with_spare(comm, c, strict, last_rank(-1), 1); });
  }
}

void run_baduse(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  unused_parameters(comm);
  Case c;
  expect_throw<UsageError>("stage 3 without Sharded", "zero::Sharded", [&] {
    c.stage = 3;
    Net net(1, 2, /*wrap=*/false);
    initialize(net.ptr(), parse(config_json(c, world), world), comm);
  });
  expect_throw<UsageError>("block wrapped twice", "wrapped", [&] {
    Block b(kWidth, kHidden);
    zero::Sharded once(b);
    zero::Sharded twice{torch::nn::AnyModule(once)};  // Sharded(Sharded(block))
  });
  expect_throw<UsageError>("same block in two wrappers", "wrapped twice", [&] {
    c.stage = 3;
    Net net(1, 0, true);
    Block b(kWidth, kHidden);
    net->blocks->push_back(zero::Sharded(b));
    net->blocks->push_back(zero::Sharded(b));
    initialize(net.ptr(), parse(config_json(c, world), world), comm);
  });
  expect_throw<UsageError>("params on two devices", "different devices", [&] {
    c.stage = 1;
    Net net(1, 2, false);
    net->register_parameter("on_meta",
                            torch::empty({3}, torch::TensorOptions().device(torch::kMeta)));
    initialize(net.ptr(), parse(config_json(c, world), world), comm);
  });
  {
    c.stage = 2;
    Net net(1, 2, false);
    Engine engine = initialize(net.ptr(), parse(config_json(c, world), world), comm);
    expect_throw<UsageError>("step without backward", "without backward", [&] { engine.step(); });
    const auto [xs, ys] = samples(3, rank * 2, 2);
    const at::Tensor x = xs, y = ys;  // lambdas capture variables, not bindings (C++17)
    expect_throw<UsageError>("non-scalar loss", "scalar",
                             [&] { engine.backward(torch::square(net->forward(x) - y)); });
    expect_throw<NonFiniteLossError>(
        "non-finite loss", zero::detail::str("rank ", rank, " at step 0"),
        [&] { engine.backward(torch::mse_loss(net->forward(x), y) * std::nan("")); });
    engine.backward(torch::mse_loss(net->forward(x), y));  // still usable afterwards
    engine.step();
    EXPECT(engine.global_steps() == 1, "engine unusable after rejected calls");
  }
  if (world > 1) {
    expect_throw<UsageError>("ranks with different models", "differs across ranks", [&] {
      c.stage = 1;
      Net net(1, rank == world - 1 ? 3 : 2, false);
      initialize(net.ptr(), parse(config_json(c, world), world), comm);
    });
  }
  expect_throw<ConfigError>("unsupported optimizer", "optimizer", [&] {
    c.stage = 0;
    c.optimizer = "Lamb";
    Net net(1, 2, false);
    initialize(net.ptr(), parse(config_json(c, world), world), comm);
  });
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"golden", run_golden}, {"memory", run_memory}, {"baduse", run_baduse}});
}
