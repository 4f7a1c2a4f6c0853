// `zero report`: what ds_report and `horovodrun --check-build` tell — library versions, which
// backends are compiled in and usable here, the CPU's SIMD level and the visible GPUs.
#include <gloo/config.h>
#include <gloo/transport/tcp/device.h>
#include <torch/version.h>

#include <iomanip>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>

#if defined(ZERO_HAS_CUDA)
#include <cuda_runtime_api.h>
#endif
#if defined(ZERO_HAS_CUBLAS)
#include <cublas_api.h>
#endif
#if defined(ZERO_HAS_NCCL)
#include <nccl.h>
#endif

#include <zero/kernels/cpu.h>
#include <zero/offload/aio.h>

#include "command.h"

namespace zero::tools {
namespace {

void row(const std::string& name, const std::string& value) {
  std::cout << "  " << std::left << std::setw(22) << name << value << "\n";
}

std::string version3(int major, int minor, int patch) {
  std::ostringstream out;
  out << major << "." << minor << "." << patch;
  return out.str();
}

// The level the CPU kernels dispatch to (the same function they call), and why it may be lower
// than the CPU's best.
std::string simd_level() {
  const kernels::SimdLevel used = kernels::simd_level(), best = kernels::detected_simd_level();
  std::string out = kernels::simd_level_name(used);
  if (used == kernels::SimdLevel::kAvx2) out += " (AVX2 + FMA + F16C)";
  if (used == kernels::SimdLevel::kAvx512) out += " (AVX-512F + AVX2 + FMA + F16C)";
  if (used != best)
    out += std::string("; this CPU supports ") + kernels::simd_level_name(best) +
           ", lowered by ZERO_CPU_SIMD";
  return out;
}

#if defined(ZERO_HAS_CUDA)
// CMake's CUDA_ARCHITECTURES as built, comma-joined ("80-real,90"): N-real is machine code for
// sm_N, N-virtual PTX only, plain N both.
std::string cuda_architectures() {
  std::istringstream in(ZERO_CUDA_ARCHITECTURES);
  std::string item, out;
  while (std::getline(in, item, ',')) {
    if (item.empty()) continue;
    const auto dash = item.find('-');
    const std::string number = item.substr(0, dash);
    const std::string kind = dash == std::string::npos ? "" : item.substr(dash + 1);
    out += (out.empty() ? "sm_" : ", sm_") + number +
           (kind == "real"      ? ""
            : kind == "virtual" ? " (PTX only)"
                                : " (+PTX)");
  }
  return out.empty() ? std::string("the toolkit's default") : out;
}
#endif

// Gloo is usable when a TCP device can be created on the loopback interface.
std::string gloo_usable() {
  try {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    auto device = gloo::transport::tcp::CreateDevice(attr);
    return device ? "yes (TCP device on 127.0.0.1)" : "no (no TCP device)";
  } catch (const std::exception& e) {
    return std::string("no (") + e.what() + ")";
  }
}

#if defined(ZERO_HAS_CUDA)
int cuda_device_count(std::string* why) {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    *why = cudaGetErrorString(status);
    return 0;
  }
  return count;
}
#endif

int run_report(const std::vector<std::string>& args) {
  for (size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--help" || args[i] == "-h") {
      std::cout << "usage: zero report\n  prints versions, compiled backends and devices\n";
      return 0;
    }
    std::cerr << "zero report: unknown argument '" << args[i] << "'\n";
    return 2;
  }
  std::cout << "zero report\n\nversions\n";
  row("zero", ZERO_VERSION);
  row("LibTorch", version3(TORCH_VERSION_MAJOR, TORCH_VERSION_MINOR, TORCH_VERSION_PATCH));
  row("Gloo", version3(GLOO_VERSION_MAJOR, GLOO_VERSION_MINOR, GLOO_VERSION_PATCH));
#if defined(__clang__)
  row("compiler", std::string("clang ") + __clang_version__);
#elif defined(__GNUC__)
  row("compiler", std::string("g++ ") + __VERSION__);
#endif
  row("C++ standard", std::to_string(__cplusplus));
  int gpus = 0;
  std::string no_gpu_reason = "built without CUDA";
#if defined(ZERO_HAS_CUDA)
  int runtime = 0;
  cudaRuntimeGetVersion(&runtime);
  row("CUDA runtime", version3(runtime / 1000, (runtime % 1000) / 10, 0));
  int driver = 0;
  if (cudaDriverGetVersion(&driver) == cudaSuccess && driver > 0)
    row("CUDA driver", version3(driver / 1000, (driver % 1000) / 10, 0));
  else
    row("CUDA driver", "none");
#if defined(ZERO_HAS_CUBLAS)
  int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
  cublasGetProperty(MAJOR_VERSION, &cublas_major);
  cublasGetProperty(MINOR_VERSION, &cublas_minor);
  cublasGetProperty(PATCH_LEVEL, &cublas_patch);
  row("cuBLAS", version3(cublas_major, cublas_minor, cublas_patch));
#else
  row("cuBLAS", "not linked (the CUDA toolkit had no libcublas)");
#endif
  gpus = cuda_device_count(&no_gpu_reason);
#else
  row("CUDA", "not compiled in");
#endif
#if defined(ZERO_HAS_NCCL)
  int nccl = 0;
  ncclGetVersion(&nccl);
  row("NCCL", version3(nccl / 10000, (nccl % 10000) / 100, nccl % 100));
#else
  row("NCCL", "not compiled in");
#endif

  std::cout << "\nbackends (compiled / usable here)\n";
  row("gloo (CPU)", "compiled; usable: " + gloo_usable());
#if defined(ZERO_HAS_NCCL)
  row("nccl (CUDA)", std::string("compiled; usable: ") +
                         (gpus > 0 ? "yes" : "no (no GPU: " + no_gpu_reason + ")"));
#else
  row("nccl (CUDA)", "not compiled (no CUDA toolkit / NCCL at build time)");
#endif
#if defined(ZERO_HAS_CUDA)
  row("CUDA kernels",
      "compiled for " + cuda_architectures() + "; usable: " + (gpus > 0 ? "yes" : "no"));
#else
  row("CUDA kernels", "not compiled");
#endif

  const std::string uring = offload::io_uring_unavailable_reason();
  row("io_uring (NVMe)",
      uring.empty() ? "usable (a ring is set up and a NOP completes)" : "not usable: " + uring);

  std::cout << "\nhardware\n";
  row("CPU threads", std::to_string(std::thread::hardware_concurrency()));
  row("CPU SIMD", simd_level());
  if (gpus == 0) {
    row("GPUs visible", "0 (" + no_gpu_reason + ")");
  } else {
#if defined(ZERO_HAS_CUDA)
    row("GPUs visible", std::to_string(gpus));
    for (int d = 0; d < gpus; ++d) {
      cudaDeviceProp prop{};
      if (cudaGetDeviceProperties(&prop, d) != cudaSuccess) continue;
      std::ostringstream desc;
      desc << prop.name << ", sm_" << prop.major << prop.minor << ", "
           << (prop.totalGlobalMem >> 20) << " MiB";
      row("  GPU " + std::to_string(d), desc.str());
    }
#endif
  }
  return 0;
}

}  // namespace

ZERO_COMMAND("report", "versions, compiled backends, io_uring, CPU SIMD level and visible GPUs",
             run_report);

}  // namespace zero::tools
