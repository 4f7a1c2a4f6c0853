// Who am I in the job (RankEnv from env://, OpenMPI or Slurm variables) and how to build the
// world communicator from that: rendezvous through c10d::TCPStore, then node / cross-node groups.
#pragma once

#include <zero/comm/communicator.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace zero {

enum class LaunchSource { kEnv, kOpenMpi, kSlurm, kSingle };
const char* to_string(LaunchSource source);

struct RankEnv {
  int rank = 0, world_size = 1, local_rank = 0, local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  LaunchSource source = LaunchSource::kSingle;
  // ZERO_JOB_TOKEN (any launch mode): the job's secret; empty: a job without one. Ranks whose
  // tokens differ refuse each other at the rendezvous.
  std::string job_token;
};

// Precedence: env:// (RANK and WORLD_SIZE set; LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT optional), else OpenMPI (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK/LOCAL_SIZE), else
// Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_TASKS_PER_NODE; master is the first
// host of SLURM_JOB_NODELIST / SLURM_NODELIST), else a single process. MASTER_ADDR /
// MASTER_PORT override the defaults (127.0.0.1 / 29500) and ZERO_JOB_TOKEN gives the job's secret
// (at least 16 characters) in every mode. Throws ConfigError on
// malformed or inconsistent values (e.g. RANK >= WORLD_SIZE, multi-node OpenMPI without
// MASTER_ADDR).
RankEnv detect_rank_env();

// 10 minutes; the ZERO_TIMEOUT environment variable (seconds, > 0) overrides it.
std::chrono::milliseconds default_timeout();
// ZERO_COMM_TRANSPORT (auto, shm or tcp); unset: kAuto. ConfigError on any other value.
Transport default_transport();

struct CommOptions {
  Backend backend = Backend::kGloo;
  std::chrono::milliseconds timeout = default_timeout();
  int device_index = -1;                      // NCCL: the CUDA device; -1 = env.local_rank
  Transport transport = default_transport();  // Gloo; sub-groups inherit it
};

// Rendezvous through c10d::TCPStore (rank 0 hosts it at master_addr:master_port), then builds
// the world communicator. A world of one process uses an in-process store (no port). Blocks
// until every rank arrived; throws TimeoutError naming the ranks that did not arrive within
// options.timeout.
std::shared_ptr<Communicator> init_communicator(const RankEnv& env,
                                                const CommOptions& options = {});

// Sub-groups built on top of new_group(); collective over `world` (every rank calls them).
// node_group: the ranks of this node (consecutive blocks of env.local_world_size ranks).
// cross_node_group: one rank per node, those with this rank's local_rank (so local_rank 0s
// form one group, local_rank 1s another, ...). Requires world_size % local_world_size == 0.
std::shared_ptr<Communicator> node_group(Communicator& world, const RankEnv& env);
std::shared_ptr<Communicator> cross_node_group(Communicator& world, const RankEnv& env);

namespace detail {
// detect_rank_env() with an injectable environment lookup (returns nullptr when unset).
RankEnv detect_rank_env(const std::function<const char*(const char*)>& getenv_fn);
// Expands a Slurm host list: "node[01-03,7],gpu-a" -> node01 node02 node03 node7 gpu-a.
std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist);
// Expands SLURM_TASKS_PER_NODE: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& spec);
}  // namespace detail

}  // namespace zero
