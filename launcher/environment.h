// What each rank's process sees: its environment (RANK, LOCAL_RANK, ... plus the forwarded
// variables and .deepspeed_env lines) and its argv (--local_rank=N); local GPU detection.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "options.h"
#include "resources.h"

namespace zero::launcher {

using EnvMap = std::map<std::string, std::string>;

// Variables whose name starts with one of these are forwarded to every node.
// DeepSpeed's EXPORT_ENVS (NCCL, UCX) and ours: ZERO_, and GLOO_ (GLOO_SOCKET_IFNAME picks the
// interface our Gloo ranks talk over, as NCCL_SOCKET_IFNAME does for NCCL).
inline const std::vector<std::string> kExportPrefixes = {"NCCL_", "ZERO_", "UCX_", "GLOO_"};
inline constexpr const char* kEnvFileName = ".deepspeed_env";
// The job secret every rank gets; the rendezvous refuses processes without the same value.
inline constexpr const char* kJobTokenVar = "ZERO_JOB_TOKEN";
// With --max_restarts: how many times zerorun has restarted the job (0 on the first launch);
// zero::initialize resumes from checkpoint.save_dir when it is above 0.
inline constexpr const char* kRestartCountVar = "ZERO_RESTART_COUNT";

// 32 hex digits from /dev/urandom.
std::string new_job_token();

EnvMap current_environment();  // a copy of environ

// GPUs of this machine from /proc/driver/nvidia/gpus, else the /dev/nvidiaN device nodes (no
// nvidia-smi, no CUDA runtime), and the launcher's own CUDA_VISIBLE_DEVICES. Dirs replaceable
// for tests.
LocalDevices detect_local_devices(const std::string& proc_dir = "/proc/driver/nvidia/gpus",
                                  const std::string& dev_dir = "/dev");

// KEY=VALUE lines (blank lines and # comments skipped); throws UsageError on other lines.
EnvMap parse_env_file(const std::string& text, const std::string& origin);
// The variables forwarded to every node: the prefixes above taken from `env`, then the lines
// of $HOME/.deepspeed_env, then ./.deepspeed_env (later ones win, as in DeepSpeed).
EnvMap collect_exports(const EnvMap& env, const std::string& home_dir, const std::string& cwd);

struct RankPlacement {
  int rank = 0, local_rank = 0, world_size = 1, local_world_size = 1;
  int node_rank = 0, num_nodes = 1;
};

// The environment of one rank: `base` + the exports + the torch.distributed variables.
// `visible_devices` (the node's slot list) sets CUDA_VISIBLE_DEVICES when non-empty.
EnvMap build_rank_env(const EnvMap& base, const EnvMap& exports, const RankPlacement& placement,
                      const std::string& master_addr, int master_port,
                      const std::string& visible_devices);

// PROGRAM --local_rank=N ARGS... (DeepSpeed puts --local_rank before the user's arguments).
std::vector<std::string> rank_argv(const Options& options, int local_rank);

std::vector<std::string> to_envp(const EnvMap& env);  // "KEY=VALUE" strings

}  // namespace zero::launcher
