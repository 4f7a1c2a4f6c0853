// One rank of an elastic job (tests/cluster/elastic_restart.sh): the test model on a dataset of
// kSamples indexed samples, an elastic config (global batch 16 at 2 or 4 data-parallel ranks),
// a checkpoint every 2 steps into OUT/ckpt, zero::DistributedSampler for the data. Each rank logs
// the samples it trains on (OUT/samples_<restart>_<rank>.txt: "step index" lines) and its pid
// (OUT/pid_<restart>_<rank>); at the end rank 0 writes the parameters (OUT/final.pt).
//   elastic_worker OUT STEPS STEP_SLEEP_MS      one rank (under zerorun)
//   elastic_worker --compare A.pt B.pt TOL      exit 0 when every parameter is within TOL (rel.)
#include "test_model.h"

#include <zero/config/config.h>
#include <zero/engine/distributed_sampler.h>
#include <zero/engine/engine.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include <unistd.h>

using namespace zero;
using namespace zero::test;

namespace {

constexpr int64_t kSamples = 200;

std::string config_json(const std::string& out) {
  return R"({"elasticity": {"enabled": true, "max_train_batch_size": 16,
               "micro_batch_sizes": [2, 4], "min_gpus": 2, "max_gpus": 4, "version": 0.1},
             "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.05}},
             "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0.001,
                           "warmup_max_lr": 0.01, "warmup_num_steps": 4}},
             "gradient_clipping": 1.0,
             "zero_optimization": {"stage": 2, "reduce_bucket_size": 1000},
             "steps_per_print": 1000,
             "checkpoint": {"save_dir": ")" +
         out + R"(/ckpt", "save_interval_steps": 2}})";
}

int compare(const std::string& a, const std::string& b, double tolerance) {
  std::vector<torch::Tensor> x, y;
  torch::load(x, a);
  torch::load(y, b);
  if (x.size() != y.size()) {
    std::cerr << "compare: " << x.size() << " vs " << y.size() << " tensors\n";
    return 1;
  }
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i)
    worst = std::max(worst, ((x[i] - y[i]).norm() / (y[i].norm() + 1e-12)).item<double>());
  std::cout << "max relative difference " << worst << " (tolerance " << tolerance << ")\n";
  return worst <= tolerance ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--compare")
    return compare(argv[2], argv[3], std::atof(argv[4]));
  if (argc != 4) {
    std::cerr << "usage: elastic_worker OUT STEPS STEP_SLEEP_MS | --compare A B TOL\n";
    return 2;
  }
  const std::string out = argv[1];
  const int64_t steps = std::atoll(argv[2]);
  const int sleep_ms = std::atoi(argv[3]);
  torch::set_num_threads(1);
  try {
    auto comm = world_communicator();
    const int world = comm->world_size(), rank = comm->rank();
    const char* restart_env = std::getenv("ZERO_RESTART_COUNT");
    const std::string restart = restart_env && *restart_env ? restart_env : "0";
    std::ofstream(out + "/pid_" + restart + "_" + std::to_string(rank)) << getpid();
    ConfigOptions options;
    options.world_size = world;
    const ParsedConfig parsed = parse_config_string(config_json(out), options, "elastic.json");
    Net net(42, 2, /*wrap=*/false);
    Engine engine = initialize(net.ptr(), parsed, comm);
    DistributedSampler sampler(kSamples, engine, DistributedSampler::Options{5, true});
    std::ofstream log(out + "/samples_" + restart + "_" + std::to_string(rank) + ".txt",
                      std::ios::app);
    if (rank == 0)
      std::printf(
          "elastic worker: restart %s, %d ranks, micro %lld x %lld accumulation, from "
          "step %lld\n",
          restart.c_str(), world, (long long)parsed.config.train_micro_batch_size_per_gpu,
          (long long)parsed.config.gradient_accumulation_steps, (long long)engine.global_steps());
    std::fflush(stdout);
    while (engine.global_steps() < steps) {
      const int64_t step = engine.global_steps();
      for (int64_t m = 0; m < parsed.config.gradient_accumulation_steps; ++m) {
        const std::vector<int64_t> idx = sampler.next();
        std::vector<torch::Tensor> xs, ys;
        for (int64_t i : idx) {
          auto [x, y] = samples(7, i, 1);
          xs.push_back(x);
          ys.push_back(y);
          log << step << " " << i << "\n";
        }
        log.flush();
        engine.backward(torch::mse_loss(net->forward(torch::cat(xs)), torch::cat(ys)));
        engine.step();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms));
    }
    std::vector<torch::Tensor> params;
    for (const auto& [name, value] : engine.full_parameters()) params.push_back(value);
    if (rank == 0) torch::save(params, out + "/final.pt");
    comm->barrier()->wait();
    if (rank == 0)
      std::printf("elastic worker: done at step %lld\n", (long long)engine.global_steps());
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "elastic worker: " << e.what() << std::endl;
    return 1;
  }
}
