// zero::DistributedOptimizer (torch's AdamW, Horovod style) against the engine's stage 0 (its
// SIMD AdamW) on the example GPT, same model, data, buckets and ranks, interleaved in one run.
// Run under zerorun; rank 0 prints a table row per variant (see run.sh).
#include "data.h"
#include "model.h"

#include <zero/zero.h>

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

constexpr int64_t kMicro = 8;
constexpr int64_t kBucketNumel = 100000;  // ds_config_stage0.json's reduce_bucket_size

const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "betas": [0.9, 0.95], "eps": 1e-8,
                                            "weight_decay": 0.01}},
  "zero_optimization": {"stage": 0, "overlap_comm": true, "reduce_bucket_size": 100000}
})";

struct Run {
  double ms_per_step = 0;
  double loss = 0;
};

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// `steps` timed steps after `warmup` untimed ones; one_step(step) returns the loss.
Run timed(int warmup, int steps, const std::function<double(int)>& one_step) {
  for (int s = 0; s < warmup; ++s) one_step(s);
  Run r;
  const auto start = std::chrono::steady_clock::now();
  for (int s = warmup; s < warmup + steps; ++s) r.loss = one_step(s);
  r.ms_per_step =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
      steps;
  return r;
}

}  // namespace

int main() {
  torch::set_num_threads(1);
  const int steps = env_int("STEPS", 30), rounds = env_int("ROUNDS", 3), warmup = 3;
  const std::string text = gpt::read_text_file(ZERO_GPT_DATA);
  const gpt::CharTokenizer tokenizer(text);
  // gpt_train's default model: vocabulary, context 64, 3 layers, 4 heads, d_model 128.
  const gpt::GptConfig model_config{tokenizer.vocab_size(), 64, 3, 4, 128};
  const gpt::TextDataset data(tokenizer.encode(text), model_config.context, 1234);
  auto comm = zero::world_communicator();
  const int rank = comm->rank(), world = comm->world_size();
  auto batch = [&](int step) { return data.batch(step, 0, rank, world, kMicro, 1); };

  std::vector<double> engine_ms, dist_ms;
  double engine_loss = 0, dist_loss = 0;
  int64_t params = 0;
  for (int round = 0; round < rounds; ++round) {
    {
      torch::manual_seed(7);
      gpt::Gpt model(model_config);
      params = gpt::count_parameters(*model);
      zero::ConfigOptions options;
      options.world_size = world;
      zero::Engine engine =
          zero::initialize(model.ptr(), zero::parse_config_string(kConfig, options), comm);
      const Run r = timed(warmup, steps, [&](int s) {
        const gpt::Batch b = batch(s);
        at::Tensor loss = model->loss(b.tokens, b.targets);
        engine.backward(loss);
        engine.step();
        return loss.item<double>();
      });
      engine_ms.push_back(r.ms_per_step);
      engine_loss = r.loss;
    }
    {
      torch::manual_seed(7);
      gpt::Gpt model(model_config);
      auto adamw = std::make_shared<torch::optim::AdamW>(
          model->parameters(),
          torch::optim::AdamWOptions(1e-3).betas({0.9, 0.95}).eps(1e-8).weight_decay(0.01));
      zero::DistributedOptions options;
      options.fusion_threshold_bytes = kBucketNumel * 4;
      options.comm = comm;
      zero::DistributedOptimizer dist(adamw, *model, options);
      const Run r = timed(warmup, steps, [&](int s) {
        const gpt::Batch b = batch(s);
        dist.zero_grad();
        at::Tensor loss = model->loss(b.tokens, b.targets);
        loss.backward();
        dist.step();
        return loss.item<double>();
      });
      dist_ms.push_back(r.ms_per_step);
      dist_loss = r.loss;
    }
  }
  if (rank == 0) {
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double e = median(engine_ms), d = median(dist_ms);
    std::printf(
        "| %d | engine stage 0 (zero::initialize, SIMD AdamW) | %lld | %.1f | 1.00x | %.4f |\n",
        world, static_cast<long long>(params), e, engine_loss);
    std::printf(
        "| %d | DistributedOptimizer (torch::optim::AdamW) | %lld | %.1f | %.2fx | %.4f |\n", world,
        static_cast<long long>(params), d, d / e, dist_loss);
  }
  comm->barrier()->synchronize();
  return 0;
}
