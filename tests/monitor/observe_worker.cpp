// observe_worker: the test model on the ranks of zerorun at ZeRO stages 1 and 2 with
// comms_logger (debug: each record names the engine phase that issued it) and
// wall_clock_breakdown. Checks that the logger counted exactly the collectives each stage must
// issue; the breakdown lines on stdout are checked by check_observe.py.
#include <zero/engine/engine.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <string>

#include "test_model.h"

namespace {

constexpr int kSteps = 6, kGas = 2, kMicro = 4, kEvery = 2;

std::string config(int stage) {
  // reduce_bucket_size 1: every parameter is a bucket of its own.
  return R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "steps_per_print": 2, "wall_clock_breakdown": true,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "zero_optimization": {"stage": )" +
         std::to_string(stage) + R"(, "reduce_bucket_size": 1},
    "comms_logger": {"enabled": true, "debug": true}})";
}

// Count per record name, all message sizes together.
std::map<std::string, int64_t> counts(const zero::CommsLog& log) {
  std::map<std::string, int64_t> out;
  for (const auto& e : log.entries()) out[e.name] += e.count;
  return out;
}

int run(int stage, const std::shared_ptr<zero::Communicator>& comm) {
  const int rank = comm->rank(), world = comm->world_size();
  zero::ConfigOptions options;
  options.world_size = world;
  auto net = zero::test::Net(5);
  int64_t params = 0;
  for (const auto& p : net->parameters()) params += p.requires_grad() ? 1 : 0;
  zero::Engine engine =
      zero::initialize(net.ptr(), zero::parse_config_string(config(stage), options), comm);
  const zero::CommsLog* log = engine.comms_log();
  if (!log) {
    std::cerr << "comms_logger enabled but no log\n";
    return 1;
  }
  const auto before = counts(*log);  // initialize's own collectives
  for (int step = 0; step < kSteps; ++step)
    for (int m = 0; m < kGas; ++m) {
      const int64_t first = ((step * kGas + m) * world + rank) * kMicro;
      auto [x, y] = zero::test::samples(3, first, kMicro);
      engine.backward(torch::mse_loss(net->forward(x), y));
      engine.step();
    }
  auto after = counts(*log);
  for (const auto& [name, n] : before) after[name] -= n;
  // Stage 2: one reduce-scatter per bucket per micro-step. Stage 1: one all-reduce per bucket
  // on each accumulation boundary. Both: the global norm's all-reduce and one all-gather of
  // the updated shard per step, plus the breakdown's min/max all-reduce every kEvery steps.
  std::map<std::string, int64_t> expected;
  if (stage == 2)
    expected["reduce_scatter | [Caller: backward]"] = params * kSteps * kGas;
  else
    expected["all_reduce | [Caller: backward]"] = params * kSteps;
  expected["all_reduce | [Caller: step]"] = kSteps;
  expected["all_reduce | [Caller: wall_clock_breakdown]"] = kSteps / kEvery;
  expected["all_gather | [Caller: step]"] = kSteps;
  // Once, at the first backward that reduces: rank 0's bucket launch order to every rank.
  if (world > 1) expected["broadcast | [Caller: backward]"] = 1;
  int failures = 0;
  for (const auto& [name, n] : after) {
    if (n == 0) continue;
    const int64_t want = expected.count(name) ? expected[name] : 0;
    if (n != want) {
      std::cerr << "stage " << stage << " rank " << rank << ": " << n << " x '" << name
                << "', expected " << want << "\n";
      ++failures;
    }
  }
  for (const auto& [name, n] : expected)
    if (after[name] != n) {
      std::cerr << "stage " << stage << " rank " << rank << ": missing '" << name << "'\n";
      ++failures;
    }
  for (const auto& e : log->entries())
    if (e.count <= 0 || e.total_ms < 0 || e.total_bytes != e.count * e.msg_bytes || e.algbw < 0 ||
        e.busbw < 0) {
      std::cerr << "stage " << stage << ": bad record '" << e.name << "'\n";
      ++failures;
    }
  if (rank == 0) std::cout << "comms summary stage " << stage << ":\n";
  const std::string summary = engine.comms_summary();  // printed on rank 0
  if (summary.find("reduce_scatter") == std::string::npos && stage == 2) ++failures;
  if (failures == 0 && rank == 0) std::cout << "observe_worker: stage " << stage << " counts OK\n";
  return failures;
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  try {
    auto comm = zero::world_communicator();
    int failures = 0;
    for (int stage : {2, 1}) failures += run(stage, comm);
    comm->barrier()->wait();
    return failures == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::cerr << "observe_worker: " << e.what() << std::endl;
    return 1;
  }
}
