// zerorun's command line: the Options value, its parser (DeepSpeed's `deepspeed` flags plus a
// few of our own) and the shell word splitting/quoting used for --launcher_args and ssh.
#pragma once

#include <string>
#include <vector>

namespace zero::launcher {

enum class LauncherKind { kLocal, kSsh, kPdsh, kSlurm, kOpenMpi };

struct Options {
  std::string hostfile = "/job/hostfile";  // DeepSpeed's DLTS_HOSTFILE
  bool hostfile_given = false;             // --hostfile was passed explicitly
  std::string include;                     // "host1:0,2@host2"
  std::string exclude;
  int num_nodes = -1;  // -1: all hosts of the hostfile
  int num_gpus = -1;   // --num_gpus / --nproc_per_node; -1: slots of the hostfile or local GPUs
  std::string master_addr;  // empty: 127.0.0.1 on one node, else the first host's name
  int master_port = 29500;  // TORCH_DISTRIBUTED_DEFAULT_PORT
  int node_rank = -1;       // -1: start every node (node 0 local, the others remote)
  LauncherKind launcher = LauncherKind::kSsh;
  std::string launcher_args;  // extra words for ssh / pdsh / srun / mpirun
  int ssh_port = -1;          // -p for ssh (and pdsh through PDSH_SSH_ARGS_APPEND)
  bool no_local_rank = false;
  std::string each_rank_log_dir;  // --enable_each_rank_log DIR
  bool save_pid = false;
  double grace_period_s = 5.0;  // SIGTERM -> SIGKILL delay when the job is torn down
  // Elastic restarts (torchrun's names): after a failure, relaunch on the hosts that remain (a
  // dropped host rejoins when it answers over ssh again) up to max_restarts times, while at
  // least min_nodes are left; at most max_nodes hosts at once (-1: all).
  int max_restarts = 0;
  int min_nodes = 1;
  int max_nodes = -1;
  // Internal, used on remote nodes: the resources chosen by node 0, and whether EOF on
  // stdin (the ssh connection closing) tears the job down.
  std::string world_info;
  bool exit_on_stdin_eof = false;
  bool help = false;
  bool check_build = false;  // --check-build: print what this build has, run nothing

  std::string program;
  std::vector<std::string> program_args;
};

// Parses argv[1..] (without the program name). Throws UsageError on bad input.
Options parse_options(const std::vector<std::string>& args);

std::string usage_text();
const char* launcher_name(LauncherKind kind);

// Splits like a POSIX shell (quotes, backslashes), without expansions: for --launcher_args.
std::vector<std::string> split_shell_words(const std::string& text);
// Quotes one word for a POSIX shell ('...' with embedded quotes escaped); plain words stay.
std::string shell_quote(const std::string& word);
std::string shell_join(const std::vector<std::string>& words);

}  // namespace zero::launcher
