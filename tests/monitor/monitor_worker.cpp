// monitor_worker OUT_DIR: fp16 training (dynamic loss scale, accumulation 2, an injected inf
// gradient on rank 1 at step 4) with csv_monitor + tensorboard under OUT_DIR; rank 0 also writes
// OUT_DIR/expected.jsonl, every event the engine should have logged, computed from the engine's
// accessors and the losses this program passed, for check_worker_run.py to hold the files to,
// and checks that the files reach the disk every steps_per_print steps, not in between.
#include <zero/engine/engine.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstdio>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <string>

#include "test_model.h"

namespace {

constexpr int kSteps = 10, kGas = 2, kMicro = 4, kPoisonStep = 4;

std::string config(const std::string& dir) {
  return R"({"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
    "steps_per_print": 3,
    "fp16": {"enabled": true, "loss_scale": 0, "initial_scale_power": 8, "loss_scale_window": 3,
             "hysteresis": 1},
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.01,
                  "warmup_num_steps": 6}},
    "zero_optimization": {"stage": 2, "reduce_bucket_size": 500},
    "csv_monitor": {"enabled": true, "output_path": ")" +
         dir + R"(/csv", "job_name": "job"},
    "tensorboard": {"enabled": true, "output_path": ")" +
         dir + R"(/tb", "job_name": "job"}})";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: monitor_worker OUT_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  torch::set_num_threads(1);
  spdlog::set_level(spdlog::level::warn);
  try {
    auto comm = zero::world_communicator();
    const int rank = comm->rank(), world = comm->world_size();
    zero::ConfigOptions options;
    options.world_size = world;
    auto net = zero::test::CastNet(7);
    zero::Engine engine =
        zero::initialize(net.ptr(), zero::parse_config_string(config(dir), options), comm);
    const int64_t tbs = engine.config().train_batch_size;
    std::ofstream expected;
    if (rank == 0) expected.open(dir + "/expected.jsonl");
    auto expect = [&](const char* tag, double value, int64_t step) {
      expected << std::setprecision(17) << R"({"tag": "Train/Samples/)" << tag << R"(", "step": )"
               << step << R"(, "value": )" << value << "}\n";
    };
    for (int step = 0; step < kSteps; ++step) {
      double loss_sum = 0;
      for (int m = 0; m < kGas; ++m) {
        const int64_t first = ((step * kGas + m) * world + rank) * kMicro;
        auto [x, y] = zero::test::samples(11, first, kMicro);
        torch::Tensor out = net->forward(x.to(torch::kHalf));
        if (step == kPoisonStep && rank == 1 && m == 1)
          out.register_hook([](const torch::Tensor& g) {
            return torch::full_like(g, std::numeric_limits<double>::infinity());
          });
        const torch::Tensor loss = torch::mse_loss(out.to(torch::kFloat), y);
        engine.backward(loss);
        engine.step();
        loss_sum += loss.item<double>() / kGas;
      }
      engine.log_scalar("Train/Samples/program_value", 0.5 * step);
      if (rank != 0) continue;
      const int64_t samples = engine.global_steps() * tbs;
      expect("train_loss", loss_sum, samples - tbs);
      expect("lr", engine.lr(), samples);
      expect("loss_scale", engine.loss_scale(), samples);
      expect("grad_norm", engine.last_grad_norm(), samples);
      expect("skipped_steps", static_cast<double>(engine.skipped_steps()), samples);
      expect("program_value", 0.5 * step, samples);
      expect("model_states_bytes", static_cast<double>(engine.memory_report().model_states_bytes()),
             samples);
      // Flushed every steps_per_print (3) steps: after steps 6 and 7 the file holds 6 rows.
      if (engine.global_steps() == 6 || engine.global_steps() == 7) {
        std::ifstream lr_csv(dir + "/csv/job/Train_Samples_lr.csv");
        int lines = 0;
        for (std::string l; std::getline(lr_csv, l);) ++lines;
        if (lines - 1 != 6) {
          std::cerr << "after step " << engine.global_steps() << " the lr CSV has " << lines - 1
                    << " rows on disk, expected 6 (flushed at steps 3 and 6)\n";
          return 1;
        }
      }
    }
    if (rank == 0 && engine.skipped_steps() != 1) {
      std::cerr << "expected one skipped step, got " << engine.skipped_steps() << "\n";
      return 1;
    }
    comm->barrier()->wait();
  } catch (const std::exception& e) {
    std::cerr << "monitor_worker: " << e.what() << std::endl;
    return 1;
  }
  return 0;
}
