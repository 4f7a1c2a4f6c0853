// Builds the ssh / pdsh / srun / mpirun command lines (DeepSpeed's multinode_runner.py runners).
#include "remote.h"

#include <sstream>

#include <zero/error.h>

namespace zero::launcher {
namespace {

std::string join(const std::vector<std::string>& parts, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? sep : "") + parts[i];
  return out;
}

void append(std::vector<std::string>* to, const std::vector<std::string>& words) {
  to->insert(to->end(), words.begin(), words.end());
}

// srun and mpirun place ranks by count only: a node must use slots 0..k-1.
void check_whole_slots(const Resources& resources, const char* launcher) {
  for (const NodeSlots& n : resources)
    for (size_t i = 0; i < n.slots.size(); ++i)
      ZERO_CHECK(n.slots[i] == static_cast<int>(i), UsageError, "zerorun: --launcher ", launcher,
                 " cannot pick slots (", n.host,
                 " uses a slot list other than 0..N-1); --include/--exclude whole hosts only");
}

EnvMap exports_with_master(const Options& o, const EnvMap& exports) {
  EnvMap all = exports;
  all["MASTER_PORT"] = std::to_string(o.master_port);
  if (!o.master_addr.empty()) all["MASTER_ADDR"] = o.master_addr;
  return all;
}

}  // namespace

std::vector<std::string> node_command(const Options& o, const Resources& resources, int node_rank,
                                      const std::string& master_addr,
                                      const std::string& zerorun_path) {
  std::ostringstream grace;
  grace << o.grace_period_s;
  std::vector<std::string> argv = {zerorun_path,
                                   "--world_info=" + encode_world_info(resources),
                                   "--node_rank=" + std::to_string(node_rank),
                                   "--master_addr=" + master_addr,
                                   "--master_port=" + std::to_string(o.master_port),
                                   "--grace_period=" + grace.str(),
                                   "--exit_on_stdin_eof"};
  if (o.no_local_rank) argv.push_back("--no_local_rank");
  if (!o.each_rank_log_dir.empty()) argv.push_back("--enable_each_rank_log=" + o.each_rank_log_dir);
  argv.push_back("--");
  argv.push_back(o.program);
  append(&argv, o.program_args);
  return argv;
}

std::string remote_shell_command(const std::string& cwd, const EnvMap& exports,
                                 const std::vector<std::string>& node_argv) {
  std::string cmd = "cd " + shell_quote(cwd) + " && exec env";
  for (auto& [k, v] : exports) cmd += " " + shell_quote(k + "=" + v);
  return cmd + " " + shell_join(node_argv);
}

std::vector<std::string> ssh_command(const Options& o, const std::string& host,
                                     const std::string& remote_command,
                                     const std::string& pdsh_ssh_args_append) {
  std::vector<std::string> argv = {"ssh"};
  append(&argv, split_shell_words(o.launcher_args));
  append(&argv, split_shell_words(pdsh_ssh_args_append));
  if (o.ssh_port > 0) append(&argv, {"-p", std::to_string(o.ssh_port)});
  append(&argv, {host, remote_command});
  return argv;
}

std::vector<std::string> pdsh_command(const Options& o, const std::string& host,
                                      const std::string& remote_command) {
  std::vector<std::string> argv = {"pdsh", "-S", "-f", "1024", "-w", host};
  append(&argv, split_shell_words(o.launcher_args));
  argv.push_back(remote_command);
  return argv;
}

EnvMap pdsh_env(const Options& o, const std::string& pdsh_ssh_args_append) {
  EnvMap env = {{"PDSH_RCMD_TYPE", "ssh"}};
  std::string append_args = pdsh_ssh_args_append;
  if (o.ssh_port > 0)
    append_args +=
        (append_args.empty() ? "" : " ") + std::string("-p ") + std::to_string(o.ssh_port);
  if (!append_args.empty()) env["PDSH_SSH_ARGS_APPEND"] = append_args;
  return env;
}

std::vector<std::string> srun_command(const Options& o, const Resources& resources,
                                      bool from_hostfile, const EnvMap& exports) {
  std::vector<std::string> argv = {"srun"};
  if (from_hostfile || o.num_nodes > 0 || o.num_gpus > 0) {
    check_whole_slots(resources, "slurm");
    argv.push_back("--ntasks=" + std::to_string(total_slots(resources)));
    argv.push_back("--nodes=" + std::to_string(resources.size()));
    bool uniform = true;
    for (const NodeSlots& n : resources) uniform &= n.slots.size() == resources[0].slots.size();
    if (uniform) argv.push_back("--ntasks-per-node=" + std::to_string(resources[0].slots.size()));
    if (from_hostfile) {
      std::vector<std::string> hosts;
      for (const NodeSlots& n : resources) hosts.push_back(n.host);
      argv.push_back("--nodelist=" + join(hosts, ","));
    }
  }
  append(&argv, split_shell_words(o.launcher_args));
  std::string export_arg = "--export=ALL";
  for (auto& [k, v] : exports_with_master(o, exports))
    if (k != kJobTokenVar) export_arg += "," + k + "=" + v;  // ALL carries it, out of ps's sight
  argv.push_back(export_arg);
  argv.push_back(o.program);
  append(&argv, o.program_args);
  return argv;
}

std::vector<std::string> mpirun_command(const Options& o, const Resources& resources,
                                        const EnvMap& exports) {
  check_whole_slots(resources, "openmpi");
  std::vector<std::string> hosts;
  for (const NodeSlots& n : resources)
    hosts.push_back(n.host + ":" + std::to_string(n.slots.size()));
  std::vector<std::string> argv = {"mpirun", "-n", std::to_string(total_slots(resources)), "--host",
                                   join(hosts, ",")};
  append(&argv, split_shell_words(o.launcher_args));
  for (auto& [k, v] : exports_with_master(o, exports))  // -x NAME: the value stays out of ps
    append(&argv, {"-x", k == kJobTokenVar ? k : k + "=" + v});
  argv.push_back(o.program);
  append(&argv, o.program_args);
  return argv;
}

}  // namespace zero::launcher
