// ZeRO++ and MiCS against plain stage 3 on 2-4 ranks (started by zerorun): `--suite hpz` trains
// each case with zero_hpz_partition_size and without, and wants the same bits (hpZ moves the same
// values: a secondary copy of the parameters within a group of ranks that later gathers read);
// `--suite qwz` trains each case with zero_quantized_weights, near stage 3 but not equal to it, and
// equal bit for bit with hpZ on top (the backward then reads the forward's dequantized values,
// which a quantized gather of the same shards reproduces).
#include "worker_util.h"

#include <zero/comm/host_topology.h>
#include <zero/engine/engine.h>
#include <zero/engine/init.h>

#include <cstdio>
#include <optional>
#include <set>
#include <string>
#include <vector>

using namespace zero;
using namespace zero::test;

namespace {

struct Trained {
  Params params;
  MemoryReport memory;
};

// Steps [first, last) of the training every case runs, on `engine`. `peek`: full_parameters()
// after every micro-step as well (its exact gathers must leave training as it was).
void train_steps(Engine& engine, Net& net, const Case& c, int world, int rank, int first, int last,
                 bool peek = false) {
  const int64_t global = c.micro * c.gas * world;
  for (int step = first; step < last; ++step)
    for (int m = 0; m < c.gas; ++m) {
      auto [x, y] = samples(7, step * global + (m * world + rank) * c.micro, c.micro);
      const auto dtype = net->input->weight.scalar_type();
      engine.backward(torch::mse_loss(net->forward(x.to(dtype)).to(torch::kFloat), y));
      engine.step();
      if (peek) engine.full_parameters();
    }
}

Trained train_case(const std::shared_ptr<Communicator>& comm, const Case& c,
                   const std::string& extra_zero, bool peek = false) {
  const int world = comm->world_size(), rank = comm->rank();
  Net net(42, 2, /*wrap=*/true, c.reuse_block);
  Engine engine = initialize(net.ptr(), parse(config_json(c, world, extra_zero), world), comm);
  train_steps(engine, net, c, world, rank, 0, c.steps, peek);
  // Before full_parameters(), whose gather drops the secondary copies.
  const MemoryReport memory = engine.memory_report();
  return {engine.full_parameters(), memory};
}

struct Named {
  std::string name;
  Case c;
  std::string extra_zero;
};

// The stage 3 cases both suites train.
std::vector<Named> stage3_cases() {
  std::vector<Named> cases;
  Case plain;
  plain.stage = 3;
  cases.push_back({"plain", plain, ""});
  Case acc = plain;
  acc.gas = 3;  // micro-steps 2 and 3 gather every unit from the secondary copies
  acc.micro = 1;
  acc.clip = 0.05;
  cases.push_back({"gas 3 clip", acc, ""});
  Case reuse = plain;
  reuse.reuse_block = true;
  reuse.gas = 2;
  reuse.micro = 1;
  reuse.max_reuse_distance = 0;
  cases.push_back({"block reused, released between uses", reuse, ""});
  reuse.max_reuse_distance = 1000000000;
  cases.push_back({"block reused, kept between uses", reuse, ""});
  Case big = plain;
  big.bucket = 100000;
  big.overlap = false;
  big.gas = 2;
  cases.push_back({"one bucket, no overlap", big, ""});
  Case bf16 = plain;
  bf16.gas = 2;
  bf16.extra_top = R"(, "bf16": {"enabled": true})";
  cases.push_back({"bf16", bf16, ""});
  cases.push_back(
      {"offload_param + offload_optimizer", acc,
       R"(, "offload_param": {"device": "cpu"}, "offload_optimizer": {"device": "cpu"})"});
  return cases;
}

void run_hpz(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::vector<Named> cases = stage3_cases();
  Case plain;
  plain.stage = 3;

  std::set<int> sizes = {2, world};
  for (const Named& k : cases) {
    const Trained base = train_case(comm, k.c, k.extra_zero);
    EXPECT(base.memory.secondary_gathers == 0, k.name, ": secondary gathers without hpZ");
    Net initial(42, 2, true, k.c.reuse_block);
    for (const auto& [name, value] : base.params)
      if (name == "input.weight")
        EXPECT(!torch::equal(initial->input->weight, value.to(torch::kFloat)), k.name,
               ": did not train");
    for (int h : sizes) {
      if (h < 2 || world % h != 0) continue;
      const Trained hpz = train_case(
          comm, k.c, k.extra_zero + zero::detail::str(R"(, "zero_hpz_partition_size": )", h));
      EXPECT(bitwise_equal(hpz.params, base.params), k.name, ", hpZ ", h,
             ": not bitwise equal to stage 3 (max rel diff ", max_rel_diff(hpz.params, base.params),
             ")");
      EXPECT(hpz.memory.secondary_gathers > 0, k.name, ", hpZ ", h, ": only ",
             hpz.memory.secondary_gathers, " of ", hpz.memory.unit_gathers,
             " unit gathers within the group");
      if (rank == 0)
        std::printf(
            "hpz world %d size %d %-36s bitwise equal; %lld of %lld unit gathers within "
            "the group\n",
            world, h, k.name.c_str(), (long long)hpz.memory.secondary_gathers,
            (long long)hpz.memory.unit_gathers);
    }
  }
  if (world == 4)
    expect_throw<UsageError>("hpZ size not dividing", "does not divide", [&] {
      Net net(42, 2, true);
      initialize(net.ptr(),
                 parse(config_json(plain, world, R"(, "zero_hpz_partition_size": 3)"), world),
                 comm);
    });
}

void run_qwz(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string qwz = R"(, "zero_quantized_weights": true)";
  for (const Named& k : stage3_cases()) {
    const Trained base = train_case(comm, k.c, k.extra_zero);
    const Trained quantized = train_case(comm, k.c, k.extra_zero + qwz);
    const double diff = max_rel_diff(quantized.params, base.params);
    // int8 blocks: each gathered weight within half a step (1/256 of its block's largest
    // magnitude) of the true one; after a few steps the models differ by about that much.
    // Relative to each parameter's norm: a small one (the 1-element head bias) that shares a
    // block with large weights gets their step, about 2% of itself in the bf16 case.
    EXPECT(diff < 0.05, k.name, ": qwZ differs from stage 3 by ", diff);
    EXPECT(!bitwise_equal(quantized.params, base.params), k.name,
           ": qwZ trained exactly like stage 3 (nothing quantized?)");
    const Trained both = train_case(
        comm, k.c, k.extra_zero + qwz + zero::detail::str(R"(, "zero_hpz_partition_size": 2)"));
    EXPECT(bitwise_equal(both.params, quantized.params), k.name,
           ": qwZ + hpZ differs from qwZ alone (max rel diff ",
           max_rel_diff(both.params, quantized.params), ")");
    EXPECT(both.memory.secondary_gathers > 0, k.name, ": qwZ + hpZ gathered nothing in the group");
    const Trained peeked = train_case(comm, k.c, k.extra_zero + qwz, /*peek=*/true);
    EXPECT(bitwise_equal(peeked.params, quantized.params), k.name,
           ": full_parameters() between steps changed qwZ training (max rel diff ",
           max_rel_diff(peeked.params, quantized.params), ")");
    if (rank == 0)
      std::printf("qwz world %d %-36s max rel diff to stage 3 %.3g; + hpZ 2 bitwise qwZ\n", world,
                  k.name.c_str(), diff);
  }
}

// The relative difference of parameter `name` between two trainings.
double param_rel_diff(const Params& a, const Params& b, const std::string& name) {
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first == name)
      return rel_diff(a[i].second.to(torch::kFloat), b[i].second.to(torch::kFloat));
  return std::numeric_limits<double>::infinity();
}

// Needs several hosts (CROSS_RANK per rank; tests/engine sets it to emulate them on one machine).
void run_qgz(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string qgz = R"(, "zero_quantized_gradients": true)";
  // hpZ over the ranks of a host, where a host holds more than one.
  const int local = world / discover_hosts(*comm).num_hosts();
  const std::string all = qgz + R"(, "zero_quantized_weights": true)" +
                          zero::detail::str(R"(, "zero_hpz_partition_size": )", local);
  const std::string all_on =
      local > 1 ? zero::detail::str("hpZ ", local, ", qwZ, qgZ") : "qwZ, qgZ";
  for (const Named& k : stage3_cases()) {
    const Trained base = train_case(comm, k.c, k.extra_zero);
    const Trained quantized = train_case(comm, k.c, k.extra_zero + qgz);
    EXPECT(quantized.memory.zeropp == "qgZ", k.name, ": ZeRO++ in effect '",
           quantized.memory.zeropp, "'");
    const double diff = max_rel_diff(quantized.params, base.params);
    // int4 gradients (7 levels a side per block): each reduction is ~10% off the exact sum;
    // Adam's normalized steps keep the parameters within a few percent after 4 steps.
    EXPECT(diff < 0.1, k.name, ": qgZ differs from stage 3 by ", diff);
    EXPECT(!bitwise_equal(quantized.params, base.params), k.name,
           ": qgZ trained exactly like stage 3 (nothing quantized?)");
    const Trained three = train_case(comm, k.c, k.extra_zero + all);
    EXPECT(three.memory.zeropp == all_on, k.name, ": ZeRO++ in effect '", three.memory.zeropp, "'");
    const double diff3 = max_rel_diff(three.params, base.params);
    EXPECT(diff3 < 0.1, k.name, ": qgZ + qwZ + hpZ differ from stage 3 by ", diff3);
    // The 1-element head bias shares its blocks with large weight gradients: quantized, it
    // would lose most of its gradient (17-59% off here); it is sent exactly instead.
    const double bias = param_rel_diff(quantized.params, base.params, "head.bias");
    EXPECT(bias < 0.03, k.name, ": qgZ's head.bias differs from stage 3 by ", bias);
    if (rank == 0)
      std::printf(
          "qgz world %d %-36s max rel diff to stage 3 %.3g (head.bias %.3g); with qwZ and "
          "hpZ %.3g\n",
          world, k.name.c_str(), diff, bias, diff3);
  }
}

// MiCS (4 ranks; pairs of ranks emulate hosts through CROSS_RANK; ZERO_TEST_CKPT_DIR): shard
// groups of 2 ranks, each within a host, against plain stage 3, which averages the same
// gradients in another order (near, not bitwise); a shard group of the whole world is plain stage
// 3 bit for bit, also with its gathers hierarchical across the hosts; checkpoints load across the
// two layouts.
void run_mics(const std::shared_ptr<Communicator>& comm) {
  const int world = comm->world_size(), rank = comm->rank();
  const std::string mics2 = R"(, "mics_shard_size": 2)";
  for (const Named& k : stage3_cases()) {
    const Trained base = train_case(comm, k.c, k.extra_zero);
    const Trained mics = train_case(comm, k.c, k.extra_zero + mics2);
    const double diff = max_rel_diff(mics.params, base.params);
    // fp32 sums in another order: rounding only. bf16 gradient shards round twice: every tensor
    // within 0.3% here, but the 1-element head.bias, one bf16 scalar, moves by a few units of its
    // last place (0.0234 on an AVX2-only EPYC, with our kernels scalar too: LibTorch's bf16).
    if (k.name == "bf16") {
      for (const auto& [name, value] : base.params) {
        const double d = param_rel_diff(mics.params, base.params, name);
        EXPECT(d < (value.numel() == 1 ? 5e-2 : 1e-2), k.name, ": MiCS 2's ", name,
               " differs from stage 3's by ", d);
      }
    } else {
      EXPECT(diff < 1e-5, k.name, ": MiCS 2 differs from stage 3 by ", diff);
    }
    EXPECT(mics.memory.mics_shard_size == 2 && mics.memory.mics_replicas == world / 2, k.name,
           ": memory report says MiCS ", mics.memory.mics_shard_size, " x ",
           mics.memory.mics_replicas);
    // Each rank holds 1/2 of the model states instead of 1/world.
    if (k.extra_zero.empty())
      EXPECT(mics.memory.master_params_bytes + mics.memory.optimizer_states_bytes >
                 base.memory.master_params_bytes + base.memory.optimizer_states_bytes,
             k.name, ": MiCS's shards are not larger than stage 3's");
    const Trained whole = train_case(
        comm, k.c,
        k.extra_zero + zero::detail::str(R"(, "mics_shard_size": )", world,
                                         R"(, "mics_hierarchical_params_gather": true)"));
    EXPECT(bitwise_equal(whole.params, base.params), k.name,
           ": MiCS over the whole world is not stage 3 bitwise (max rel diff ",
           max_rel_diff(whole.params, base.params), ")");
    if (rank == 0)
      std::printf(
          "mics world %d %-36s shard 2: max rel diff to stage 3 %.3g; shard %d (hierarchical "
          "gathers): bitwise\n",
          world, k.name.c_str(), diff, world);
  }

  // Checkpoints: MiCS's (its first shard group writes) load into plain stage 3 and into MiCS.
  const char* root = std::getenv("ZERO_TEST_CKPT_DIR");
  EXPECT(root && *root, "set ZERO_TEST_CKPT_DIR");
  if (!root || !*root) return;
  Case c;
  c.stage = 3;
  c.gas = 2;
  const std::string dir = zero::detail::str(root, "/mics");
  Net a(42, 2, true);
  Engine saver = initialize(a.ptr(), parse(config_json(c, world, mics2), world), comm);
  train_steps(saver, a, c, world, rank, 0, 2);
  saver.save_checkpoint(dir, "two");
  const Params at2 = saver.full_parameters();
  train_steps(saver, a, c, world, rank, 2, 4);
  const Params at4 = saver.full_parameters();
  {
    Net b(7, 2, true);
    Engine plain = initialize(b.ptr(), parse(config_json(c, world), world), comm);
    plain.load_checkpoint(dir, "two");
    EXPECT(bitwise_equal(plain.full_parameters(), at2),
           "MiCS checkpoint loaded at plain stage 3: parameters differ");
    plain.save_checkpoint(dir, "plain");
  }
  Net d(7, 2, true);
  Engine resumed = initialize(d.ptr(), parse(config_json(c, world, mics2), world), comm);
  resumed.load_checkpoint(dir, "plain");  // stage 3's layout back into MiCS's
  train_steps(resumed, d, c, world, rank, 2, 4);
  EXPECT(bitwise_equal(resumed.full_parameters(), at4),
         "MiCS resumed from a checkpoint (through plain stage 3) does not train as before (max rel "
         "diff ",
         max_rel_diff(resumed.full_parameters(), at4), ")");
  if (rank == 0) std::printf("mics checkpoint: loads at stage 3 bitwise; resumed MiCS bitwise\n");

  // zero::Init: each rank keeps its shard-group share of the blocks it builds; the second shard
  // group builds them from another seed and must train as the first group's values say.
  {
    const ParsedConfig parsed = parse(config_json(c, world, mics2), world);
    Net whole_net(42, 2, true);
    Engine whole = initialize(whole_net.ptr(), parsed, comm);
    train_steps(whole, whole_net, c, world, rank, 0, 2);
    std::optional<Net> net;
    {
      Init init(parsed);
      net.emplace(42 + rank / 2, 2, true);
    }
    Engine engine = initialize(net->ptr(), parsed, comm);
    train_steps(engine, *net, c, world, rank, 0, 2);
    EXPECT(bitwise_equal(engine.full_parameters(), whole.full_parameters()),
           "MiCS under zero::Init differs from the whole build (max rel diff ",
           max_rel_diff(engine.full_parameters(), whole.full_parameters()), ")");
    if (rank == 0) std::printf("mics zero::Init: bitwise the whole build\n");
  }

  expect_throw<ConfigError>("MiCS size not dividing", "does not divide", [&] {
    Net net(42, 2, true);
    initialize(net.ptr(), parse(config_json(c, world, R"(, "mics_shard_size": 3)"), world), comm);
  });
}

}  // namespace

int main(int argc, char** argv) {
  return worker_main(argc, argv,
                     {{"hpz", run_hpz}, {"qwz", run_qwz}, {"qgz", run_qgz}, {"mics", run_mics}});
}
