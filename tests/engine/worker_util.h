// What the multi-rank engine test programs share: a failure counter with EXPECT, the test
// case's ds_config, the training loop over the deterministic data set and the suite runner.
#pragma once

#include "test_model.h"

#include <zero/comm/process_group.h>
#include <zero/engine/engine.h>
#include <zero/engine/lr_schedule.h>

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace zero::test {

inline int g_failures = 0;
inline int g_rank = 0;

#define EXPECT(cond, ...)                                                                  \
  do {                                                                                     \
    if (!(cond)) {                                                                         \
      ++g_failures;                                                                        \
      std::cerr << "[rank " << g_rank << "] FAILED " #cond " at line " << __LINE__ << ": " \
                << ::zero::detail::str(__VA_ARGS__) << std::endl;                          \
    }                                                                                      \
  } while (0)

// Adam runs with eps 1e-3 so that its update depends on the gradients' scale: with a tiny eps a
// mis-averaged gradient (a sum instead of a mean) would go unnoticed.
struct Case {
  int stage = 0;
  int gas = 1;
  double clip = 0;
  std::string optimizer = "AdamW";
  int64_t bucket = 1000;  // reduce and all-gather bucket size (elements)
  bool overlap = true;
  int64_t micro = 2;
  int steps = 4;
  double beta2 = 0.99;
  std::string scheduler;            // the scheduler JSON; empty: the WarmupLR below
  bool reuse_block = false;         // the model runs block 0 twice per forward
  int64_t max_reuse_distance = -1;  // stage3_max_reuse_distance; < 0: the default
  double eps = 1e-3;                // Adam's eps
  std::string extra_top;            // more top-level keys, e.g. R"(, "bf16": {"enabled": true})"
  bool host_shared = false;         // zero_optimization.host_shared_params
};

inline const char* kWarmupLr =
    R"({"type": "WarmupLR", "params": {"warmup_min_lr": 0.001, "warmup_max_lr": 0.01, "warmup_num_steps": 3, "warmup_type": "linear"}})";

inline std::string config_json(const Case& c, int world, const std::string& extra_zero = "") {
  const std::string opt =
      c.optimizer == "SGD"
          ? R"({"type": "SGD", "params": {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}})"
          : zero::detail::str(R"({"type": ")", c.optimizer,
                              R"(", "params": {"lr": 0.01, "betas": [0.8, )", c.beta2,
                              R"(], "eps": )", c.eps, R"(, "weight_decay": 0.05}})");
  const std::string reuse =
      c.max_reuse_distance < 0
          ? ""
          : zero::detail::str(R"(, "stage3_max_reuse_distance": )", c.max_reuse_distance);
  return zero::detail::str(
      R"({"train_micro_batch_size_per_gpu": )", c.micro, R"(, "gradient_accumulation_steps": )",
      c.gas, R"(, "gradient_clipping": )", c.clip, R"(, "optimizer": )", opt, R"(, "scheduler": )",
      c.scheduler.empty() ? kWarmupLr : c.scheduler, R"(, "zero_optimization": {"stage": )",
      c.stage, R"(, "reduce_bucket_size": )", c.bucket, R"(, "allgather_bucket_size": )", c.bucket,
      R"(, "overlap_comm": )", c.overlap ? "true" : "false",
      c.stage == 3 ? R"(, "stage3_param_persistence_threshold": 30)" : "", reuse,
      c.host_shared ? R"(, "host_shared_params": true)" : "", extra_zero, "}", c.extra_top, "}");
}

inline ParsedConfig parse(const std::string& json, int world) {
  ConfigOptions o;
  o.world_size = world;
  return parse_config_string(json, o);
}

inline double rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).norm().item<double>() / std::max(b.norm().item<double>(), 1e-12);
}

using Params = std::vector<std::pair<std::string, torch::Tensor>>;  // Engine::full_parameters()

// The largest rel_diff between the tensors of two parameter lists of one model, in fp32.
// The same names, and every element of every parameter equal.
inline bool bitwise_equal(const Params& a, const Params& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].first != b[i].first || !torch::equal(a[i].second, b[i].second)) return false;
  return true;
}

inline double max_rel_diff(const Params& a, const Params& b) {
  if (a.size() != b.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, rel_diff(a[i].second.to(torch::kCPU, torch::kFloat),
                                     b[i].second.to(torch::kCPU, torch::kFloat)));
  return worst;
}

// Sample order: global batch of step s is [s*G, (s+1)*G); micro-step m of rank r takes
// micro samples at ((m * world) + r) * micro within it.
inline void train(Engine& engine, Net& net, const Case& c, int world, int rank,
                  int first_step = 0) {
  const int64_t global = c.micro * c.gas * world;
  for (int step = first_step; step < c.steps; ++step) {
    for (int m = 0; m < c.gas; ++m) {
      EXPECT(engine.is_gradient_accumulation_boundary() == (m == c.gas - 1), "boundary at micro ",
             m);
      auto [x, y] = samples(7, step * global + (m * world + rank) * c.micro, c.micro);
      engine.backward(torch::mse_loss(net->forward(x), y));
      engine.step();
    }
    EXPECT(engine.global_steps() == step + 1, "global_steps ", engine.global_steps());
  }
}

// One plain LibTorch process on the whole global batch: AdamW/SGD, hand-applied LR, clip, and
// OneCycle's momentum as DeepSpeed applies it: betas = (momentum, 0.99) for Adam/AdamW before
// every step, nothing for SGD (DeepSpeed disables cycling for optimizers without betas).
inline std::map<std::string, torch::Tensor> reference(const Case& c, int world,
                                                      const Config& config) {
  Net net(42, 2, /*wrap=*/true, c.reuse_block);  // unattached wrappers are pass-through
  std::vector<torch::Tensor> params = net->parameters();
  std::unique_ptr<torch::optim::Optimizer> opt;
  if (c.optimizer == "SGD")
    opt = std::make_unique<torch::optim::SGD>(
        params, torch::optim::SGDOptions(0.05).momentum(0.9).weight_decay(0.01));
  else if (c.optimizer == "AdamW" || c.optimizer == "Adam")  // DeepSpeed's Adam is AdamW by default
    opt = std::make_unique<torch::optim::AdamW>(
        params,
        torch::optim::AdamWOptions(0.01).betas({0.8, c.beta2}).eps(1e-3).weight_decay(0.05));
  auto schedule = LrSchedule::create(config.scheduler, config.optimizer.lr);
  const int64_t global = c.micro * c.gas * world;
  for (int step = 0; step < c.steps; ++step) {
    for (auto& g : opt->param_groups()) {
      g.options().set_lr(schedule->lr_at(step));
      const auto momentum = schedule->momentum_at(step);
      if (momentum && c.optimizer != "SGD")
        static_cast<torch::optim::AdamWOptions&>(g.options())
            .betas(std::make_tuple(*momentum, 0.99));
    }
    opt->zero_grad();
    auto [x, y] = samples(7, step * global, global);
    torch::mse_loss(net->forward(x), y).backward();
    if (c.clip > 0) torch::nn::utils::clip_grad_norm_(params, c.clip);
    opt->step();
  }
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : net->named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

template <typename E>
void expect_throw(const std::string& what, const std::string& needle,
                  const std::function<void()>& fn) {
  try {
    fn();
    EXPECT(false, what, ": no exception");
  } catch (const E& e) {
    EXPECT(std::string(e.what()).find(needle) != std::string::npos, what, ": message '", e.what(),
           "' lacks '", needle, "'");
    if (g_rank == 0) std::printf("baduse %-28s -> %s\n", what.c_str(), e.what());
  } catch (const std::exception& e) {
    EXPECT(false, what, ": wrong exception type: ", e.what());
  }
}

// The worker's main: `--suite NAME` picks one of `suites`; exit 0 when every check passed.
inline int worker_main(
    int argc, char** argv,
    const std::map<std::string, std::function<void(const std::shared_ptr<Communicator>&)>>&
        suites) {
  const std::string suite = argc > 2 && std::string(argv[1]) == "--suite" ? argv[2] : "";
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  auto it = suites.find(suite);
  if (it == suites.end()) {
    std::cerr << "unknown suite '" << suite << "'\n";
    return 2;
  }
  try {
    auto comm = world_communicator();
    g_rank = comm->rank();
    it->second(comm);
    comm->barrier()->wait();
  } catch (const std::exception& e) {
    std::cerr << "[rank " << g_rank << "] uncaught: " << e.what() << std::endl;
    return 1;
  }
  if (g_failures)
    std::cerr << "[rank " << g_rank << "] " << g_failures << " failure(s)\n";
  else if (g_rank == 0)
    std::printf("suite %s: all checks passed\n", suite.c_str());
  return g_failures ? 1 : 0;
}

}  // namespace zero::test
