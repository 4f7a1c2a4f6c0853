// The engine on a GPU against its CPU twin, in one process (world of one, NCCL on the GPU,
// Gloo on the CPU): stages 0-3 in fp32, bf16 and fp16 give the same parameters within the
// dtype's tolerance, and fp16 overflow handling behaves the same. Exits 77 (ctest: skipped)
// when LibTorch sees no CUDA device.
#include "worker_util.h"

#include <zero/core/loss_scaler.h>
#include <zero/engine/engine.h>

#include <torch/cuda.h>

#include <cstdio>
#include <cstdlib>
#include <limits>

#include "catch_after_torch.h"

using namespace zero;
using namespace zero::test;

namespace {

[[maybe_unused]] const bool kDeviceCheck = [] {
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "no CUDA device visible to LibTorch: skipping the engine GPU tests\n");
    std::exit(77);
  }
  return true;
}();

std::string config(int stage, const std::string& precision) {
  return zero::detail::str(
      R"({"train_micro_batch_size_per_gpu": 4, "gradient_clipping": 0.5, "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-3, "weight_decay": 0.05}}, "zero_optimization": {"stage": )",
      stage, R"(, "reduce_bucket_size": 1000, "allgather_bucket_size": 1000)",
      stage == 3 ? R"(, "stage3_param_persistence_threshold": 30)" : "", "}", precision, "}");
}

// Trains CastNet(42) for `steps` steps on `device`; inf gradients at the steps in `poison`.
Params train(const std::string& json, torch::Device device, int steps, std::vector<int> poison = {},
             double* scale = nullptr, int64_t* skipped = nullptr) {
  CastNet net(42);
  net->to(device);
  ConfigOptions options;
  options.world_size = 1;
  Engine engine = initialize(net.ptr(), parse_config_string(json, options));
  for (int step = 0; step < steps; ++step) {
    auto [x, y] = samples(7, step * 4, 4);
    torch::Tensor out = net->forward(x.to(device));
    if (std::find(poison.begin(), poison.end(), step) != poison.end())
      out.register_hook([](const torch::Tensor& g) {
        return torch::full_like(g, std::numeric_limits<double>::infinity());
      });
    engine.backward(torch::mse_loss(out, y.to(device)));
    engine.step();
  }
  if (scale) *scale = engine.loss_scale();
  if (skipped) *skipped = engine.skipped_steps();
  return engine.full_parameters();
}

}  // namespace

TEST_CASE("the engine on CUDA matches its CPU twin for stages 0-3 in fp32, bf16 and fp16") {
  const torch::Device gpu(torch::kCUDA, 0);
  struct Precision {
    const char* name;
    const char* json;
    double tolerance;
  };
  const Precision precisions[] = {
      {"fp32", "", 1e-4},
      {"bf16", R"(, "bf16": {"enabled": true})", 2e-2},
      {"fp16", R"(, "fp16": {"enabled": true, "initial_scale_power": 10})", 5e-3},
  };
  for (const Precision& p : precisions)
    for (int stage = 0; stage <= 3; ++stage) {
      const std::string json = config(stage, p.json);
      const double d = max_rel_diff(train(json, gpu, 5), train(json, torch::kCPU, 5));
      std::printf("engine %s stage %d: CUDA vs CPU max rel diff %.3g\n", p.name, stage, d);
      CHECK(d <= p.tolerance);
    }
}

TEST_CASE("fp16 overflow on CUDA skips the step and halves the scale as on the CPU") {
  const std::string json =
      config(2, R"(, "fp16": {"enabled": true, "initial_scale_power": 10, "hysteresis": 1})");
  double gpu_scale = 0, cpu_scale = 0;
  int64_t gpu_skipped = 0, cpu_skipped = 0;
  const auto on_gpu = train(json, torch::Device(torch::kCUDA, 0), 4, {1}, &gpu_scale, &gpu_skipped);
  const auto on_cpu = train(json, torch::kCPU, 4, {1}, &cpu_scale, &cpu_skipped);
  CHECK(gpu_scale == 512);
  CHECK(cpu_scale == 512);
  CHECK(gpu_skipped == 1);
  CHECK(cpu_skipped == 1);
  CHECK(max_rel_diff(on_gpu, on_cpu) <= 5e-3);
}
