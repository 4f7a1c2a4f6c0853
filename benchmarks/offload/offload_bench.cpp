// Optimizer offload as the user sees it, one configuration per run (under zerorun): peak RSS per
// rank from the OS while training (VmHWM after the high-water mark is reset at the end of
// initialize), the engine's own accounting, the median step time, and for NVMe the bytes the
// optimizer step moves against the raw io_uring read + write of as many bytes on the same path
// with the same block size and queue depth, measured by every rank at once in the same run.
#include "aio_raw.h"

#include <zero/comm/process_group.h>
#include <zero/config/config.h>
#include <zero/engine/engine.h>
#include <zero/engine/init.h>
#include <zero/engine/sharded.h>
#include <zero/error.h>

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <malloc.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

namespace zero::bench {
namespace {

struct Options {
  std::string offload = "none";  // none | cpu | nvme
  std::string nvme_path = "/tmp";
  std::string precision = "fp32";  // fp32 | bf16
  int stage = 3;
  int64_t params = 150'000'000;
  int64_t width = 4096;
  int64_t sub_group = 100'000'000;  // zero_optimization.sub_group_size
  int steps = 4;
  bool pipeline = true;  // pipeline_read and pipeline_write
  int buffer_count = 4;
  bool init = false;                    // build the model under zero::Init
  std::string params_offload = "none";  // offload_param: none | cpu | nvme (all shards swapped)
  int live_blocks = 2;                  // stage 3: blocks gathered at once (in use + prefetched)
  int64_t bucket = 5'000'000;           // reduce_bucket_size
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      ZERO_CHECK(i + 1 < argc, UsageError, "offload_bench: ", a, " needs a value");
      return argv[++i];
    };
    if (a == "--offload")
      o.offload = value();
    else if (a == "--nvme_path")
      o.nvme_path = value();
    else if (a == "--precision")
      o.precision = value();
    else if (a == "--stage")
      o.stage = std::stoi(value());
    else if (a == "--params")
      o.params = std::stoll(value());
    else if (a == "--width")
      o.width = std::stoll(value());
    else if (a == "--sub_group")
      o.sub_group = std::stoll(value());
    else if (a == "--steps")
      o.steps = std::stoi(value());
    else if (a == "--no_pipeline")
      o.pipeline = false;
    else if (a == "--buffer_count")
      o.buffer_count = std::stoi(value());
    else if (a == "--init")
      o.init = true;
    else if (a == "--params_offload")
      o.params_offload = value();
    else if (a == "--live_blocks")
      o.live_blocks = std::stoi(value());
    else if (a == "--bucket")
      o.bucket = std::stoll(value());
    else
      throw UsageError("offload_bench: unknown argument " + a);
  }
  return o;
}

int64_t status_kib(const char* field) {  // /proc/self/status VmRSS / VmHWM, in KiB
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size()));
  return -1;
}

double mib(int64_t bytes) {
  return static_cast<double>(bytes) / (1 << 20);
}

// Stage 3 keeps at most live_blocks blocks gathered (by default one in use, one prefetched) so
// that the peak is ZeRO's 16 Psi / N plus about a block, not DeepSpeed's default of up to 1e9
// live parameters.
std::string config_json(const Options& o) {
  const int64_t block_numel = o.width * o.width + o.width;
  std::string offload;
  if (o.offload != "none")
    offload = detail::str(
        R"(, "offload_optimizer": {"device": ")", o.offload, R"(", "nvme_path": ")", o.nvme_path,
        R"(", "pipeline_read": )", o.pipeline ? "true" : "false", R"(, "pipeline_write": )",
        o.pipeline ? "true" : "false", R"(, "buffer_count": )", o.buffer_count, "}");
  if (o.params_offload != "none")
    offload += detail::str(
        R"(, "offload_param": {"device": ")", o.params_offload, R"(", "nvme_path": ")", o.nvme_path,
        R"(", "max_in_cpu": 0, "buffer_count": 2, "buffer_size": )", block_numel, "}");
  return detail::str(
      R"({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "steps_per_print": 1000,
          "optimizer": {"type": "AdamW", "params": {"lr": 1e-4}},)",
      o.precision == "bf16" ? R"("bf16": {"enabled": true},)" : "",
      R"("zero_optimization": {"stage": )", o.stage, R"(, "sub_group_size": )", o.sub_group,
      R"(, "reduce_bucket_size": )", o.bucket, R"(, "allgather_bucket_size": )", o.bucket,
      R"(, "stage3_max_live_parameters": )", o.live_blocks * block_numel,
      R"(, "stage3_max_reuse_distance": )", block_numel, R"(, "stage3_prefetch_bucket_size": )",
      o.live_blocks > 1 ? block_numel : 0, offload, "}}");
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace
}  // namespace zero::bench

int main(int argc, char** argv) {
  using namespace zero;
  using namespace zero::bench;
  spdlog::set_level(spdlog::level::warn);
  try {
    const Options o = parse(argc, argv);
    auto comm = world_communicator();
    const int rank = comm->rank(), world = comm->world_size();
    const int64_t rss_start_kib = status_kib("VmRSS:");
    const int64_t layers =
        (o.params + o.width * o.width + o.width - 1) / (o.width * o.width + o.width);
    ConfigOptions copts;
    copts.world_size = world;
    const ParsedConfig parsed = parse_config_string(config_json(o), copts);
    torch::manual_seed(0);
    auto model = std::make_shared<torch::nn::SequentialImpl>();
    {
      std::optional<Init> init;
      if (o.init) init.emplace(parsed);
      for (int64_t l = 0; l < layers; ++l)
        model->push_back(Sharded(torch::nn::Linear(o.width, o.width)));
    }
    const int64_t hwm_build_kib = status_kib("VmHWM:");
    Engine engine = initialize(model, parsed, comm);
    const auto dtype = o.precision == "bf16" ? torch::kBFloat16 : torch::kFloat;
    malloc_trim(0);
    std::ofstream("/proc/self/clear_refs") << "5";  // VmHWM := VmRSS: the peak while training
    const int64_t rss_init_kib = status_kib("VmRSS:");
    std::vector<double> step_s, opt_s;
    // The peak RSS of each phase (forward, backward, optimizer step) over the steps: where the
    // training peak comes from.
    int64_t phase_peak_kib[3] = {0, 0, 0};
    auto end_phase = [&](int phase) {
      phase_peak_kib[phase] = std::max(phase_peak_kib[phase], status_kib("VmHWM:"));
      std::ofstream("/proc/self/clear_refs") << "5";
    };
    for (int s = 0; s < o.steps; ++s) {
      comm->barrier()->synchronize();
      std::ofstream("/proc/self/clear_refs") << "5";
      const auto t0 = std::chrono::steady_clock::now();
      torch::Tensor x = torch::randn({1, 16, o.width}).to(dtype);
      torch::Tensor loss = model->forward(x).to(torch::kFloat).square().mean();
      end_phase(0);
      engine.backward(loss);
      end_phase(1);
      const auto t1 = std::chrono::steady_clock::now();
      engine.step();
      end_phase(2);
      comm->barrier()->synchronize();
      const auto t2 = std::chrono::steady_clock::now();
      step_s.push_back(std::chrono::duration<double>(t2 - t0).count());
      opt_s.push_back(std::chrono::duration<double>(t2 - t1).count());
    }
    const int64_t hwm_kib = *std::max_element(phase_peak_kib, phase_peak_kib + 3);
    std::fprintf(stderr, "rank %d: peak RSS MiB by phase: forward %.0f, backward %.0f, step %.0f\n",
                 comm->rank(), phase_peak_kib[0] / 1024.0, phase_peak_kib[1] / 1024.0,
                 phase_peak_kib[2] / 1024.0);
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    const MemoryReport m = engine.memory_report();
    // Raw io_uring throughput of as many bytes as one optimizer step moves each way, every rank
    // at once, same path and aio settings (the engine's defaults: block 1 MiB, queue depth 8).
    // This VM's disk varies by 2x from one measurement to the next: the median of three.
    RawIoResult raw;
    if (o.offload == "nvme") {
      std::vector<RawIoResult> runs;
      for (int i = 0; i < 3; ++i) {
        comm->barrier()->synchronize();
        runs.push_back(
            measure_aio_raw(o.nvme_path, m.nvme_bytes, offload::AioOptions{}, int64_t{64} << 20));
      }
      comm->barrier()->synchronize();
      std::sort(runs.begin(), runs.end(), [](const RawIoResult& a, const RawIoResult& b) {
        return a.read_s + a.write_s < b.read_s + b.write_s;
      });
      raw = runs[1];
    }
    // Steps after the first (which also learns the trace and touches new memory).
    std::vector<double> later(step_s.begin() + std::min<size_t>(1, step_s.size()), step_s.end());
    std::vector<double> later_opt(opt_s.begin() + std::min<size_t>(1, opt_s.size()), opt_s.end());
    const double step_med = median(later), opt_med = median(later_opt);
    std::vector<int64_t> mine{
        hwm_kib, rss_init_kib, rss_start_kib,
        std::max({static_cast<int64_t>(ru.ru_maxrss), hwm_kib, hwm_build_kib}), hwm_build_kib};
    at::Tensor t = at::tensor(mine, at::kLong);
    at::Tensor all = at::empty({world * 5}, at::kLong);
    comm->all_gather(t, all)->wait();
    if (rank == 0) {
      int64_t max_hwm = 0, max_init = 0, start = 0, max_ru = 0, max_build = 0;
      for (int r = 0; r < world; ++r) {
        max_hwm = std::max(max_hwm, all[r * 5].item<int64_t>());
        max_init = std::max(max_init, all[r * 5 + 1].item<int64_t>());
        start = std::max(start, all[r * 5 + 2].item<int64_t>());
        max_ru = std::max(max_ru, all[r * 5 + 3].item<int64_t>());
        max_build = std::max(max_build, all[r * 5 + 4].item<int64_t>());
      }
      std::printf(
          "| %d | %d | %s | %s%s%s | %lld | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f "
          "| "
          "%.3f | %.3f |",
          world, o.stage, o.precision.c_str(), o.offload.c_str(),
          o.params_offload == "none" ? "" : (" + params " + o.params_offload).c_str(),
          o.init ? " + Init" : "", static_cast<long long>(layers * (o.width * o.width + o.width)),
          start / 1024.0, max_build / 1024.0, max_init / 1024.0, max_hwm / 1024.0, max_ru / 1024.0,
          mib(m.model_states_bytes()), mib(m.host_bytes()), mib(m.nvme_bytes), step_med, opt_med);
      if (o.offload == "nvme" && o.params_offload == "none") {
        const double moved = 2.0 * m.nvme_bytes;  // every sub-group read and written once
        const double pipe_gbps = moved / opt_med / 1e9;
        const double raw_s = raw.read_s + raw.write_s;
        const double raw_gbps = raw_s > 0 ? 2.0 * raw.bytes / raw_s / 1e9 : 0;
        std::printf(" %.2f | %.2f | %.0f%% |", pipe_gbps, raw_gbps,
                    raw_gbps > 0 ? 100 * pipe_gbps / raw_gbps : 0.0);
      } else {
        std::printf(" - | - | - |");
      }
      std::printf("\n");
    }
    comm->barrier()->synchronize();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "offload_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
