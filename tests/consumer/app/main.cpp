// Uses the installed library the way a user would: parse a ds_config, train a small model
// through zero::initialize (backward, step), save a checkpoint, load it into a fresh engine and
// find the same parameters. One process: the world of one.
#include <zero/zero.h>

#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <iostream>

#include <unistd.h>

namespace {

constexpr const char* kConfig = R"({"train_batch_size": 8,
  "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
  "zero_optimization": {"stage": 2}, "bf16": {"enabled": true}})";

std::shared_ptr<torch::nn::SequentialImpl> make_model() {
  torch::manual_seed(0);
  return torch::nn::Sequential(torch::nn::Linear(8, 32), torch::nn::ReLU(),
                               torch::nn::Linear(32, 1))
      .ptr();
}

int fail(const std::string& what) {
  std::cerr << "consumer: " << what << "\n";
  return 1;
}

}  // namespace

int main() {
  zero::ConfigOptions options;
  options.world_size = 1;
  const zero::ParsedConfig parsed = zero::parse_config_string(kConfig, options);
  if (parsed.config.zero_optimization.stage != 2 ||
      parsed.config.train_micro_batch_size_per_gpu != 8)
    return fail("unexpected config values");

  auto model = make_model();
  zero::Engine engine = zero::initialize(model, parsed);
  torch::manual_seed(1);
  const torch::Tensor x = torch::randn({8, 8});
  const torch::Tensor y = x.sum(1, true);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    const torch::Tensor loss =
        torch::mse_loss(model->forward(x.to(torch::kBFloat16)).to(torch::kFloat), y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    engine.backward(loss);
    engine.step();
  }
  if (!(last < 0.5 * first))
    return fail("the loss did not fall: " + std::to_string(first) + " -> " + std::to_string(last));

  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("zero_consumer_" + std::to_string(::getpid()));
  const std::string saved = engine.save_checkpoint(dir.string(), "consumer");
  auto fresh = make_model();
  zero::Engine again = zero::initialize(fresh, parsed);
  if (!again.load_checkpoint(dir.string(), "consumer")) return fail("no checkpoint loaded");
  const auto a = engine.full_parameters(), b = again.full_parameters();
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = torch::equal(a[i].second, b[i].second);
  std::filesystem::remove_all(dir);
  if (!same) return fail("the loaded parameters differ from the saved ones");
  if (again.global_steps() != 30) return fail("the loaded step count is not 30");

  std::cout << "consumer ok: stage 2 bf16, loss " << first << " -> " << last << ", checkpoint "
            << saved << " loaded\n";
  return 0;
}
