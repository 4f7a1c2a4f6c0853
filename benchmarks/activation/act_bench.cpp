// act_bench: one training configuration of the example GPT (GPT-2 small's shape by default)
// under zerorun; each rank prints one JSON line: peak RSS, the bytes LibTorch allocated during
// the measured step, the bytes each block's forward left alive (its activations kept for
// backward), the engine's accounting (model states, gathers, activation checkpoints) and
// forward / backward / optimizer times. benchmarks/activation/run.py builds the checkpointing
// table, benchmarks/tp/activations.sh the tensor-parallel one (--tp N, --sequence-parallel).
#include <zero/tp/random.h>
#include <zero/zero.h>

#include <ATen/Parallel.h>
#include <c10/core/Allocator.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <sys/resource.h>
#include <torch/torch.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <numeric>
#include <optional>
#include <string>
#include <thread>

#include "data.h"
#include "model.h"

namespace {

using Clock = std::chrono::steady_clock;

// Live bytes of the CPU allocations LibTorch makes while installed (the allocator reports
// them to the profiler's thread-local hook): what a step adds on top of what existed before.
struct AllocTracker : c10::MemoryReportingInfoBase {
  std::atomic<int64_t> live{0}, peak{0};
  void reportMemoryUsage(void*, int64_t bytes, int64_t, int64_t, c10::Device device) override {
    if (device.type() != c10::DeviceType::CPU) return;
    const int64_t now = live += bytes;
    int64_t p = peak.load();
    while (now > p && !peak.compare_exchange_weak(p, now)) {
    }
  }
  bool memoryProfilingEnabled() const override { return true; }
};

// The measured step's tracker (null in the other steps).
AllocTracker* measuring = nullptr;

// A block that records the live bytes its forward added: its output and what autograd keeps
// for its backward. The block's input is the previous block's output (already counted there),
// so in the steady state each block's figure is one layer's activations.
struct LiveBytesProbeImpl : torch::nn::Module {
  LiveBytesProbeImpl(torch::nn::AnyModule inner, std::vector<int64_t>* added)
      : inner(std::move(inner)), added(added) {
    register_module("inner", this->inner.ptr());
  }
  at::Tensor forward(const at::Tensor& x) {
    const int64_t before = measuring ? measuring->live.load() : 0;
    at::Tensor y = inner.forward(x);
    if (measuring) added->push_back(measuring->live.load() - before);
    return y;
  }
  torch::nn::AnyModule inner;
  std::vector<int64_t>* added;
};
TORCH_MODULE(LiveBytesProbe);

int64_t status_kib(const std::string& key) {  // VmHWM / VmRSS of /proc/self/status
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1));
  return 0;
}

void reset_peak_rss() {  // Linux: "5" resets VmHWM to the current RSS
  std::ofstream("/proc/self/clear_refs") << "5";
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

int run(int argc, char** argv) {
  std::string mode = "none", data_path;
  int stage = 3, steps = 2;
  int64_t context = 512, micro = 4, layers = 12, d_model = 768, heads = 12, tp = 1;
  bool sequence_parallel = false;
  double dropout = 0.0;
  for (int i = 1; i < argc; i += 2) {
    const std::string f = argv[i];
    if (f == "--sequence-parallel") {
      sequence_parallel = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) throw zero::UsageError("act_bench: " + f + " needs a value");
    const std::string v = argv[i + 1];
    if (f == "--mode")
      mode = v;  // none | ckpt | cpu
    else if (f == "--stage")
      stage = std::stoi(v);
    else if (f == "--steps")
      steps = std::stoi(v);
    else if (f == "--context")
      context = std::stoll(v);
    else if (f == "--micro")
      micro = std::stoll(v);
    else if (f == "--n-layer")
      layers = std::stoll(v);
    else if (f == "--d-model")
      d_model = std::stoll(v);
    else if (f == "--n-head")
      heads = std::stoll(v);
    else if (f == "--data")
      data_path = v;
    else if (f == "--tp")
      tp = std::stoll(v);
    else if (f == "--dropout")
      dropout = std::stod(v);
    else
      throw zero::UsageError("act_bench: unknown argument " + f);
  }
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int ranks_here = local ? std::max(1, std::atoi(local)) : 1;
  at::set_num_threads(
      std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / ranks_here));

  const std::string text = gpt::read_text_file(data_path);
  const gpt::CharTokenizer tokenizer(text);
  gpt::GptConfig g;
  g.vocab_size = tokenizer.vocab_size();
  g.context = context;
  g.n_layer = layers;
  g.d_model = d_model;
  g.n_head = heads;
  g.dropout = dropout;
  g.sequence_parallel = sequence_parallel;
  const gpt::TextDataset data(tokenizer.encode(text), context, 1234);
  // Stage 3 keeps only what it needs: no reuse keeping, about one block prefetched.
  const int64_t block_numel = 12 * d_model * d_model / tp + 13 * d_model;
  const std::string json = zero::detail::str(
      R"({"train_micro_batch_size_per_gpu": )", micro,
      R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.0003}}, "zero_optimization": {"stage": )",
      stage,
      stage == 3 ? zero::detail::str(
                       R"(, "stage3_max_reuse_distance": 0, "stage3_prefetch_bucket_size": )",
                       block_numel, R"(, "stage3_max_live_parameters": )", 3 * block_numel)
                 : "",
      "}",
      mode == "cpu"
          ? R"(, "activation_checkpointing": {"cpu_checkpointing": true, "profile": true})"
      : mode == "ckpt" ? R"(, "activation_checkpointing": {"profile": true})"
                       : "",
      R"(, "tensor_parallel": {"autotp_size": )", tp, R"(}, "steps_per_print": 1000})");
  const std::shared_ptr<zero::Communicator> world_comm = zero::world_communicator();
  zero::ConfigOptions options;
  options.world_size = world_comm->world_size();
  const zero::ParsedConfig parsed = zero::parse_config_string(json, options, "act_bench");
  std::optional<zero::ParallelGrid> grid;
  if (tp > 1) {
    grid = zero::parallel_grid(parsed.config, world_comm);
    g.tensor_group = grid->tensor_group();
    zero::tp::rng_tracker().seed(1234, grid->tensor_rank());
  }
  torch::manual_seed(1234);
  gpt::Gpt model(g);
  std::vector<int64_t> block_added_bytes;  // each block's, in the measured step's forward
  model->wrap_blocks([&](torch::nn::AnyModule block) {
    if (mode != "none") block = torch::nn::AnyModule(zero::Checkpointed(block));
    block = torch::nn::AnyModule(LiveBytesProbe(block, &block_added_bytes));
    return torch::nn::AnyModule(zero::Sharded(block));
  });
  zero::Engine engine = grid ? zero::initialize(model.ptr(), parsed, *grid)
                             : zero::initialize(model.ptr(), parsed, world_comm);
  const int rank = engine.rank(), world = engine.world_size();
  const int data_rank = grid ? grid->data_rank() : rank,
            data_size = grid ? grid->data_size() : world;
  const int64_t rss_after_init = status_kib("VmRSS") * 1024;

  double fwd = 0, bwd = 0, opt = 0, loss_value = 0;
  int64_t step_peak_rss = 0, torch_peak = 0, rss_before_step = 0;
  zero::MemoryReport before_step;
  // Times: the mean over the steps after the first (which records stage 3's order); the
  // recompute counters are cumulative, so they are read as the difference over the same steps.
  zero::ActivationCheckpointStats timed_from{};
  const int timed_steps = std::max(1, steps - 1);
  for (int step = 0; step < steps; ++step) {
    const bool measured = step == steps - 1;  // memory: the last step
    if (step == std::min(1, steps - 1)) timed_from = engine.activation_checkpointing()->stats();
    const gpt::Batch b = data.batch(step, 0, data_rank, data_size, micro, 1);
    zero::world_communicator()->barrier()->synchronize();
    if (measured) {
      before_step = engine.memory_report();
      rss_before_step = status_kib("VmRSS") * 1024;
      engine.activation_checkpointing()->reset_peaks();
      reset_peak_rss();
    }
    auto tracker = std::make_shared<AllocTracker>();
    std::optional<c10::DebugInfoGuard> guard;
    if (measured) {
      guard.emplace(c10::DebugInfoKind::PROFILER_STATE, tracker);
      measuring = tracker.get();
    }
    auto t = Clock::now();
    const at::Tensor loss = model->loss(b.tokens, b.targets);
    const double f = seconds_since(t);
    t = Clock::now();
    engine.backward(loss);
    const double bk = seconds_since(t);
    t = Clock::now();
    engine.step();
    const double o = seconds_since(t);
    if (step >= steps - timed_steps)
      fwd += f / timed_steps, bwd += bk / timed_steps, opt += o / timed_steps;
    if (measured) {
      measuring = nullptr;
      guard.reset();
      loss_value = loss.item<double>();
      step_peak_rss = status_kib("VmHWM") * 1024;
      torch_peak = tracker->peak.load();
    }
  }
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const zero::MemoryReport m = engine.memory_report();
  const zero::ActivationCheckpointStats a = engine.activation_checkpointing()->stats();
  // One layer's activations: the mean over the blocks (equal but for a few bytes).
  const int64_t block_bytes =
      block_added_bytes.empty()
          ? 0
          : std::accumulate(block_added_bytes.begin(), block_added_bytes.end(), int64_t{0}) /
                static_cast<int64_t>(block_added_bytes.size());
  std::printf(
      "{\"rank\": %d, \"world\": %d, \"tp\": %lld, \"sequence_parallel\": %s, "
      "\"dropout\": %g, \"block_activation_bytes\": %lld, \"stage\": %d, \"mode\": \"%s\", "
      "\"params\": %lld, "
      "\"context\": %lld, \"micro\": %lld, \"layers\": %lld, \"d_model\": %lld, \"heads\": %lld, "
      "\"vocab\": %lld, \"peak_rss_bytes\": %lld, \"rss_after_init_bytes\": %lld, "
      "\"step_peak_rss_bytes\": %lld, \"rss_before_step_bytes\": %lld, "
      "\"torch_step_peak_bytes\": %lld, \"model_states_bytes\": %lld, "
      "\"comm_buffers_bytes\": %lld, \"gathered_before_step_bytes\": %lld, "
      "\"peak_gathered_bytes\": %lld, \"act_peak_bytes\": %lld, \"act_host_peak_bytes\": %lld, "
      "\"act_moved_bytes\": %lld, \"recompute_s\": %.4f, \"ckpt_forward_s\": %.4f, "
      "\"forward_s\": %.4f, \"backward_s\": %.4f, \"optimizer_s\": %.4f, \"loss\": %.5f}\n",
      rank, world, static_cast<long long>(tp), sequence_parallel ? "true" : "false", dropout,
      static_cast<long long>(block_bytes), stage, mode.c_str(),
      static_cast<long long>(gpt::count_parameters(*model)), static_cast<long long>(context),
      static_cast<long long>(micro), static_cast<long long>(layers),
      static_cast<long long>(d_model), static_cast<long long>(heads),
      static_cast<long long>(g.vocab_size), static_cast<long long>(usage.ru_maxrss) * 1024,
      static_cast<long long>(rss_after_init), static_cast<long long>(step_peak_rss),
      static_cast<long long>(rss_before_step), static_cast<long long>(torch_peak),
      static_cast<long long>(m.model_states_bytes()), static_cast<long long>(m.comm_buffers_bytes),
      static_cast<long long>(before_step.gathered_params_bytes),
      static_cast<long long>(m.peak_gathered_params_bytes),
      static_cast<long long>(a.peak_live_bytes), static_cast<long long>(a.peak_host_live_bytes),
      static_cast<long long>(a.moved_bytes),
      (a.recompute_seconds - timed_from.recompute_seconds) / timed_steps,
      (a.forward_seconds - timed_from.forward_seconds) / timed_steps, fwd, bwd, opt, loss_value);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "act_bench: " << e.what() << "\n";
    return 1;
  }
}
