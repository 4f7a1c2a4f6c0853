// `zero bench adam [--json] [--threads T] [--iters N] [--simd L] [--flat N] [--mixed N]`:
// our vectorized CPU AdamW vs LibTorch's torch::optim::AdamW vs a floor kernel with exactly
// the Adam step's memory traffic, on the same tensor shapes in one run.
#include <ATen/Parallel.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <zero/error.h>
#include <zero/kernels/adam.h>
#include <zero/kernels/cpu.h>

#include "bench_args.h"

#include "command.h"

namespace zero::tools {
namespace {

constexpr int kAdamBytesPerElem = 28;  // read p, g, m, v; write p, m, v (fp32)
constexpr int kOursPerTorch = 3;       // our and the floor's timed runs per LibTorch run (cheap)

struct Options {
  bool json = false;
  int threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int iters = 5;
  int64_t flat_numel = int64_t{128} << 20;
  int64_t mixed_numel = int64_t{64} << 20;
  int mixed_tensors = 200;
  std::string simd;
};

struct Case {
  std::string name;
  std::vector<int64_t> sizes;
};

struct Result {
  std::string name;
  double elems_per_s;
};

using Clock = std::chrono::steady_clock;

double seconds_of(const std::function<void()>& fn) {
  const auto t0 = Clock::now();
  fn();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Best of the timed runs: the least disturbed by other processes on a shared machine.
double best(const std::vector<double>& v) {
  return *std::min_element(v.begin(), v.end());
}

std::vector<Result> run_case(const Case& c, const Options& opt) {
  int64_t numel = 0;
  for (int64_t n : c.sizes) numel += n;
  // Our buffers (shared by our step and the floor kernel) and LibTorch's own copies.
  std::vector<at::Tensor> p, g, m, v;
  std::vector<torch::Tensor> tp;
  torch::manual_seed(7);
  for (int64_t n : c.sizes) {
    p.push_back(torch::rand({n}) * 2 - 1);
    g.push_back((torch::rand({n}) * 2 - 1) * 1e-3);
    m.push_back(torch::zeros({n}));
    v.push_back(torch::ones({n}));  // stays positive under the floor kernel's additions
    torch::Tensor t = p.back().clone().requires_grad_(true);
    t.mutable_grad() = g.back().clone();
    tp.push_back(t);
  }
  const float lr = 1e-3f, wd = 0.01f;
  torch::optim::AdamW torch_adamw(tp, torch::optim::AdamWOptions(lr).weight_decay(wd));
  int64_t step = 0;
  auto ours = [&] {
    kernels::AdamParams prm{lr, 0.9f, 0.999f, 1e-8f, wd, true};
    prm.step = ++step;
    for (size_t i = 0; i < p.size(); ++i) {
      kernels::adam_step_cpu(prm, p[i].data_ptr<float>(), g[i].data_ptr<float>(),
                             m[i].data_ptr<float>(), v[i].data_ptr<float>(), p[i].numel());
    }
  };
  auto floor = [&] {
    for (size_t i = 0; i < p.size(); ++i) {
      kernels::adam_access_floor_cpu(p[i].data_ptr<float>(), g[i].data_ptr<float>(),
                                     m[i].data_ptr<float>(), v[i].data_ptr<float>(), p[i].numel());
    }
  };
  auto torch_step = [&] { torch_adamw.step(); };
  // One warm-up each (first touch, LibTorch's state allocation), then interleaved timed runs.
  ours();
  floor();
  torch_step();
  std::vector<double> t_ours, t_torch, t_floor;
  // LibTorch's OpenMP workers spin-wait after a parallel region and would steal the cores of
  // whatever runs next: let them go to sleep before timing our kernels again.
  const auto settle = [] { std::this_thread::sleep_for(std::chrono::milliseconds(300)); };
  settle();
  for (int it = 0; it < opt.iters; ++it) {
    for (int k = 0; k < kOursPerTorch; ++k) {
      t_ours.push_back(seconds_of(ours));
      t_floor.push_back(seconds_of(floor));
    }
    t_torch.push_back(seconds_of(torch_step));
    settle();
  }
  const double n = static_cast<double>(numel);
  return {{"zero_cpu_adam", n / best(t_ours)},
          {"torch_adamw", n / best(t_torch)},
          {"access_floor", n / best(t_floor)}};
}

constexpr const char* kUsage =
    "usage: zero bench adam [--json] [--threads T] [--iters N] [--simd scalar|avx2|avx512]\n"
    "                       [--flat NUMEL] [--mixed NUMEL] [--tensors COUNT]\n";

int usage(const std::string& problem) {
  std::cerr << "zero bench adam: " << problem << "\n" << kUsage;
  return 2;
}

int run_bench_adam(const std::vector<std::string>& args) {
  Options opt;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto next_int = [&](int64_t lo) -> int64_t {
      ZERO_CHECK(i + 1 < args.size(), UsageError, a, " needs a value");
      const std::string& s = args[++i];
      size_t used = 0;
      int64_t x = 0;
      try {
        x = std::stoll(s, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      ZERO_CHECK(used == s.size() && x >= lo, UsageError, a, " ", s,
                 ": expected an integer >= ", lo);
      return x;
    };
    if (a == "--json")
      opt.json = true;
    else if (a == "--threads")
      opt.threads = static_cast<int>(next_int(1));
    else if (a == "--iters")
      opt.iters = static_cast<int>(next_int(1));
    else if (a == "--flat")
      opt.flat_numel = next_int(1);
    else if (a == "--mixed")
      opt.mixed_numel = next_int(1);
    else if (a == "--tensors")
      opt.mixed_tensors = static_cast<int>(next_int(1));
    else if (a == "--simd" && i + 1 < args.size())
      opt.simd = args[++i];
    else if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      return 0;
    } else
      return usage("unknown argument '" + a + "'");
  }
  if (!opt.simd.empty()) {
    if (opt.simd == "scalar")
      kernels::set_simd_level(kernels::SimdLevel::kScalar);
    else if (opt.simd == "avx2")
      kernels::set_simd_level(kernels::SimdLevel::kAvx2);
    else if (opt.simd == "avx512")
      kernels::set_simd_level(kernels::SimdLevel::kAvx512);
    else
      return usage("--simd " + opt.simd + ": expected scalar, avx2 or avx512");
  }
  kernels::set_cpu_threads(opt.threads);
  at::set_num_threads(opt.threads);

  const std::vector<Case> cases = {
      {"flat" + size_label(opt.flat_numel), {opt.flat_numel}},
      {"mixed" + std::to_string(opt.mixed_tensors) + "x" + size_label(opt.mixed_numel),
       mixed_sizes(opt.mixed_numel, opt.mixed_tensors)}};
  if (!opt.json) {
    std::printf(
        "zero bench adam: threads=%d simd=%s iters=%d (best of; ours and floor 3x as many, "
        "interleaved), AdamW fp32, %d B/elem\n",
        opt.threads, kernels::simd_level_name(kernels::simd_level()), opt.iters, kAdamBytesPerElem);
    std::printf("%-16s %11s  %-24s %-24s %-24s %10s %10s\n", "case", "numel", "zero_cpu_adam",
                "torch_adamw", "access_floor", "ours/floor", "ours/torch");
  }
  std::string json = "{\"threads\": " + std::to_string(opt.threads) + ", \"cases\": [";
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const Case& c = cases[ci];
    int64_t numel = 0;
    for (int64_t n : c.sizes) numel += n;
    const std::vector<Result> r = run_case(c, opt);
    if (opt.json) {
      json += std::string(ci ? ", " : "") + "{\"case\": \"" + c.name +
              "\", \"numel\": " + std::to_string(numel) + ", \"results\": [";
      for (size_t k = 0; k < r.size(); ++k) {
        char num[64];
        std::snprintf(num, sizeof num, "%.6g", r[k].elems_per_s);
        json += std::string(k ? ", " : "") + "{\"name\": \"" + r[k].name +
                "\", \"elems_per_s\": " + num + "}";
      }
      json += "]}";
    } else {
      auto cell = [](double eps) {
        char buf[64];
        std::snprintf(buf, sizeof buf, "%6.1f M/s (%5.1f GB/s)", eps / 1e6,
                      eps * kAdamBytesPerElem / 1e9);
        return std::string(buf);
      };
      std::printf("%-16s %11lld  %-24s %-24s %-24s %9.1f%% %9.2fx\n", c.name.c_str(),
                  static_cast<long long>(numel), cell(r[0].elems_per_s).c_str(),
                  cell(r[1].elems_per_s).c_str(), cell(r[2].elems_per_s).c_str(),
                  100.0 * r[0].elems_per_s / r[2].elems_per_s, r[0].elems_per_s / r[1].elems_per_s);
      std::fflush(stdout);
    }
  }
  if (opt.json) std::cout << json << "]}\n";
  return 0;
}

}  // namespace

ZERO_COMMAND("bench adam", "CPU AdamW: ours vs LibTorch vs the memory floor (--json for JSON)",
             run_bench_adam);

}  // namespace zero::tools
