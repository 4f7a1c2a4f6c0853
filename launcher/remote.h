// Command lines that start the job elsewhere: `zerorun --node_rank i` on another node over ssh or
// pdsh, or the whole job under srun / mpirun. Pure functions of their inputs (unit-tested).
#pragma once

#include <string>
#include <vector>

#include "environment.h"
#include "options.h"
#include "resources.h"

namespace zero::launcher {

// The zerorun invocation that starts node `node_rank`'s ranks on that node (node 0's choices
// are passed along with --world_info, so the other nodes need no hostfile).
std::vector<std::string> node_command(const Options& options, const Resources& resources,
                                      int node_rank, const std::string& master_addr,
                                      const std::string& zerorun_path);

// One shell command line for the remote side: cd to the same directory, export the forwarded
// variables, exec the node command.
std::string remote_shell_command(const std::string& cwd, const EnvMap& exports,
                                 const std::vector<std::string>& node_argv);

// ssh [--launcher_args] [$PDSH_SSH_ARGS_APPEND] [-p --ssh_port] HOST REMOTE_COMMAND
std::vector<std::string> ssh_command(const Options& options, const std::string& host,
                                     const std::string& remote_command,
                                     const std::string& pdsh_ssh_args_append);
// pdsh -S -f 1024 -w HOST [--launcher_args] REMOTE_COMMAND, run with PDSH_RCMD_TYPE=ssh and
// the --ssh_port appended to PDSH_SSH_ARGS_APPEND (pdsh_env returns those variables).
std::vector<std::string> pdsh_command(const Options& options, const std::string& host,
                                      const std::string& remote_command);
EnvMap pdsh_env(const Options& options, const std::string& pdsh_ssh_args_append);

// srun / mpirun running PROGRAM directly on every slot; ranks read SLURM_* / OMPI_COMM_WORLD_*.
// MASTER_PORT (and MASTER_ADDR when given) travel with the exports.
std::vector<std::string> srun_command(const Options& options, const Resources& resources,
                                      bool from_hostfile, const EnvMap& exports);
std::vector<std::string> mpirun_command(const Options& options, const Resources& resources,
                                        const EnvMap& exports);

}  // namespace zero::launcher
