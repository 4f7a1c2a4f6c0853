// The --check-build report: build facts come from CMake (compile definitions), controllers from
// the commands found on PATH.
#include "check_build.h"

#include <unistd.h>

#include <sstream>
#include <vector>

#ifndef ZERO_BUILD_TORCH_VERSION
#define ZERO_BUILD_TORCH_VERSION "unknown"
#endif
#ifndef ZERO_BUILD_HAS_NCCL
#define ZERO_BUILD_HAS_NCCL 0
#endif
#ifndef ZERO_BUILD_HAS_CUDA
#define ZERO_BUILD_HAS_CUDA 0
#endif

namespace zero::launcher {
namespace {

// The first executable `name` on `path`, or "".
std::string find_on_path(const std::string& name, const std::string& path) {
  std::istringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const std::string candidate = (dir.empty() ? "." : dir) + "/" + name;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string line(bool yes, const std::string& what) {
  return std::string("    [") + (yes ? "X" : " ") + "] " + what + "\n";
}

// "[X] Name (cmd: /path)" when every command is on the path, else which one is missing.
std::string controller(const std::string& name, const std::vector<std::string>& commands,
                       const std::string& path) {
  std::string found, missing;
  for (const std::string& c : commands) {
    const std::string at = find_on_path(c, path);
    if (at.empty())
      missing += (missing.empty() ? "" : ", ") + c;
    else
      found += (found.empty() ? "" : ", ") + at;
  }
  return line(missing.empty(),
              name + " (" + (missing.empty() ? found : "not on PATH: " + missing) + ")");
}

}  // namespace

std::string check_build_text(const std::string& path) {
  std::string out = "zero build (zerorun --check-build):\n\nAvailable frameworks:\n";
  out += line(true, std::string("LibTorch ") + ZERO_BUILD_TORCH_VERSION + " (C++; " +
                        (ZERO_BUILD_HAS_CUDA ? "CUDA kernels built" : "CPU only") + ")");
  out += "\nAvailable controllers:\n";
  out += line(true, "zerorun (local processes)");
  out += controller("ssh", {"ssh"}, path);
  out += controller("pdsh", {"pdsh"}, path);
  out += controller("MPI", {"mpirun"}, path);
  out += controller("Slurm", {"srun", "sbatch"}, path);
  out += line(true, "env:// variables (RANK, WORLD_SIZE, MASTER_ADDR: torchrun, Kubeflow)");
  out += "\nAvailable collective backends:\n";
  out += line(true, "Gloo (CPU tensors, TCP)");
  out += line(ZERO_BUILD_HAS_NCCL, std::string("NCCL (CUDA tensors)") +
                                       (ZERO_BUILD_HAS_NCCL ? "" : ": built without CUDA/NCCL"));
  return out;
}

}  // namespace zero::launcher
