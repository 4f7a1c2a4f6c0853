// Uses the installed library the way a user would: parse a ds_config through zero::zero.
#include <zero/zero.h>

#include <iostream>

int main() {
  zero::ConfigOptions options;
  options.world_size = 2;
  auto parsed = zero::parse_config_string(R"({"train_batch_size": 8,
      "zero_optimization": {"stage": 2}, "bf16": {"enabled": true}})",
                                          options);
  const zero::Config& config = parsed.config;
  if (config.zero_optimization.stage != 2 || config.train_micro_batch_size_per_gpu != 4) {
    std::cerr << "consumer: unexpected config values\n";
    return 1;
  }
  std::cout << "consumer ok: stage " << config.zero_optimization.stage << ", micro batch "
            << config.train_micro_batch_size_per_gpu << "\n";
  return 0;
}
