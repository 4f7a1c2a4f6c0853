// zerorun: DeepSpeed's `deepspeed` launcher for native programs. Chooses the resources, then
// starts this node's ranks (and the other nodes over ssh/pdsh) or the whole job via srun/mpirun.
#include <ifaddrs.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>

#include <zero/error.h>

#include "check_build.h"
#include "environment.h"
#include "options.h"
#include "remote.h"
#include "resources.h"
#include "supervisor.h"

namespace zero::launcher {
namespace {

std::string self_path() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  ZERO_CHECK(n > 0, InternalError, "zerorun: cannot read /proc/self/exe");
  return std::string(buf, static_cast<size_t>(n));
}

std::string current_dir() {
  char buf[PATH_MAX];
  ZERO_CHECK(getcwd(buf, sizeof(buf)), InternalError, "zerorun: getcwd failed");
  return buf;
}

std::string join_ints(const std::vector<int>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + std::to_string(v[i]);
  return out;
}

// Whether `host` names this machine: localhost, our hostname, or an address of one of our
// interfaces. Node 0 of an ssh/pdsh job runs here, so it had better be this machine.
bool is_this_machine(const std::string& host) {
  if (host == "localhost") return true;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0) {
    std::string me = name;
    if (host == me || host == me.substr(0, me.find('.')) || me == host.substr(0, host.find('.')))
      return true;
  }
  addrinfo hints{}, *found = nullptr;
  hints.ai_socktype = SOCK_STREAM;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ifaddrs* ifs = nullptr;
  bool local = false;
  if (getifaddrs(&ifs) == 0) {
    for (addrinfo* a = found; a && !local; a = a->ai_next)
      for (ifaddrs* i = ifs; i && !local; i = i->ifa_next) {
        if (!i->ifa_addr || i->ifa_addr->sa_family != a->ai_family) continue;
        if (a->ai_family == AF_INET)
          local = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr.s_addr ==
                  reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        else if (a->ai_family == AF_INET6)
          local = std::memcmp(&reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr,
                              &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr,
                              sizeof(in6_addr)) == 0;
      }
    freeifaddrs(ifs);
  }
  freeaddrinfo(found);
  return local;
}

// --save_pid: /tmp/<pid>.zerorun holds zerorun's pid while it supervises (DeepSpeed writes
// /tmp/<pid>.deepspeed); removed on every way out but SIGKILL.
class PidFile {
 public:
  explicit PidFile(bool enabled) {
    if (!enabled) return;
    path_ = "/tmp/" + std::to_string(getpid()) + ".zerorun";
    FILE* f = std::fopen(path_.c_str(), "w");
    ZERO_CHECK(f, UsageError, "zerorun: cannot write ", path_);
    std::fprintf(f, "%d", static_cast<int>(getpid()));
    std::fclose(f);
  }
  ~PidFile() {
    if (!path_.empty()) std::remove(path_.c_str());
  }
  PidFile(const PidFile&) = delete;
  PidFile& operator=(const PidFile&) = delete;

 private:
  std::string path_;
};

// A spec that runs one launcher command (ssh, pdsh, srun, mpirun) with output passed through.
ProcessSpec command_spec(const std::string& label, std::vector<std::string> argv, EnvMap env,
                         bool hold_stdin) {
  ProcessSpec spec;
  spec.label = label;
  spec.argv = std::move(argv);
  spec.envp = to_envp(env);
  spec.stdin_held_pipe = hold_stdin;
  return spec;
}

// One launch of the job: this node's ranks and (ssh/pdsh) the other nodes, or srun/mpirun.
// `restart` > 0: the ranks get ZERO_RESTART_COUNT. `nodes` receives the hosts in node order.
Supervision launch(const Options& given, const std::optional<std::vector<HostEntry>>& hostfile,
                   const LocalDevices& local, EnvMap env, int restart, bool last_attempt,
                   std::vector<std::string>* nodes) {
  Options o = given;
  std::vector<std::string> notes;
  const Resources resources = select_resources(o, hostfile, local, &notes);
  if (restart == 0)
    for (const std::string& n : notes) std::cerr << "zerorun: " << n << "\n";
  for (const NodeSlots& n : resources) nodes->push_back(n.host);
  if (restart > 0)
    std::cerr << "zerorun: restart " << restart << ": " << total_slots(resources) << " ranks on "
              << resources.size() << " host(s)\n";
  if (restart > 0 || o.max_restarts > 0) env[kRestartCountVar] = std::to_string(restart);
  const std::string cwd = current_dir();
  const char* home = std::getenv("HOME");
  const EnvMap exports = collect_exports(env, home ? home : "", cwd);
  const int num_nodes = static_cast<int>(resources.size());
  std::string master_addr = o.master_addr;
  if (master_addr.empty())
    master_addr = num_nodes == 1 || !hostfile ? "127.0.0.1" : resources[0].host;

  SupervisorOptions sup{o.grace_period_s, o.exit_on_stdin_eof, "zerorun", last_attempt};
  std::vector<ProcessSpec> specs;

  if (o.launcher == LauncherKind::kSlurm || o.launcher == LauncherKind::kOpenMpi) {
    ZERO_CHECK(o.node_rank < 0, UsageError,
               "zerorun: --node_rank cannot be combined with --launcher ",
               launcher_name(o.launcher));
    std::vector<std::string> argv;
    if (o.launcher == LauncherKind::kSlurm) {
      argv = srun_command(o, resources, hostfile.has_value(), exports);
    } else {
      o.master_addr = master_addr;
      argv = mpirun_command(o, resources, exports);
    }
    std::cerr << "zerorun: " << shell_join(argv) << "\n";
    specs.push_back(command_spec(launcher_name(o.launcher), argv, env, false));
  } else {
    int node = o.node_rank >= 0 ? o.node_rank : 0;
    ZERO_CHECK(o.node_rank >= 0 || num_nodes == 1 || o.launcher != LauncherKind::kLocal, UsageError,
               "zerorun: --launcher local with ", num_nodes,
               " nodes: start one zerorun per node with --node_rank, or use ssh/pdsh");
    const int offset = rank_offset(resources, node);  // checks node < num_nodes
    const NodeSlots& mine = resources[static_cast<size_t>(node)];
    const int world = total_slots(resources);
    const bool gpu_node = local.gpu_count > 0 || !local.cuda_visible_devices.empty();
    if (num_nodes > 1) sup.name = "zerorun[node " + std::to_string(node) + "]";
    if (!o.each_rank_log_dir.empty()) {
      std::error_code ec;
      std::filesystem::create_directories(o.each_rank_log_dir, ec);
      ZERO_CHECK(!ec && std::filesystem::is_directory(o.each_rank_log_dir), UsageError,
                 "zerorun: --enable_each_rank_log ", o.each_rank_log_dir,
                 " is not a directory and cannot be created", ec ? ": " + ec.message() : "");
    }
    std::cerr << sup.name << ": node " << node << "/" << num_nodes << " (" << mine.host
              << "): ranks " << offset << "-" << offset + static_cast<int>(mine.slots.size()) - 1
              << " of " << world << ", MASTER_ADDR=" << master_addr
              << " MASTER_PORT=" << o.master_port << "\n";
    for (size_t i = 0; i < mine.slots.size(); ++i) {
      RankPlacement p{offset + static_cast<int>(i),
                      static_cast<int>(i),
                      world,
                      static_cast<int>(mine.slots.size()),
                      node,
                      num_nodes};
      ProcessSpec spec;
      spec.label = "rank " + std::to_string(p.rank);
      spec.prefix = "[rank " + std::to_string(p.rank) + "] ";
      spec.argv = rank_argv(o, p.local_rank);
      spec.envp = to_envp(build_rank_env(env, exports, p, master_addr, o.master_port,
                                         gpu_node ? join_ints(mine.slots) : ""));
      if (!o.each_rank_log_dir.empty())
        spec.log_path = o.each_rank_log_dir + "/rank_" + std::to_string(p.rank) + ".log";
      specs.push_back(std::move(spec));
    }
    if (o.node_rank < 0 && num_nodes > 1) {
      if (!is_this_machine(mine.host))
        std::cerr << sup.name << ": warning: node 0 is '" << mine.host
                  << "', which does not look like this machine, yet its ranks run here; run "
                     "zerorun on the first host of the hostfile\n";
      const std::string zerorun = self_path();
      const char* append = std::getenv("PDSH_SSH_ARGS_APPEND");
      for (int i = 1; i < num_nodes; ++i) {
        const std::string& host = resources[static_cast<size_t>(i)].host;
        std::string remote =
            remote_shell_command(cwd, exports, node_command(o, resources, i, master_addr, zerorun));
        std::string label = "node " + std::to_string(i) + " (" + host + ")";
        if (o.launcher == LauncherKind::kPdsh) {
          EnvMap penv = env;
          for (auto& [k, v] : pdsh_env(o, append ? append : "")) penv[k] = v;
          specs.push_back(command_spec(label, pdsh_command(o, host, remote), penv, true));
        } else {
          specs.push_back(
              command_spec(label, ssh_command(o, host, remote, append ? append : ""), env, true));
        }
      }
    }
  }
  return supervise_job(specs, sup);
}

// Whether `host` answers: `ssh HOST true` (ConnectTimeout 5 s), or under Slurm a one-task
// `srun --nodelist=HOST true` within 20 s. How a host is judged alive, and alive again.
bool host_answers(const Options& o, const std::string& host) {
  std::vector<std::string> argv;
  if (o.launcher == LauncherKind::kSlurm) {
    argv = {"timeout", "20", "srun", "--nodes=1", "--ntasks=1", "--nodelist=" + host};
    for (const std::string& w : split_shell_words(o.launcher_args)) argv.push_back(w);
    argv.push_back("true");
  } else {
    Options probe = o;
    probe.launcher_args += " -o ConnectTimeout=5 -o BatchMode=yes";
    const char* append = std::getenv("PDSH_SSH_ARGS_APPEND");
    argv = ssh_command(probe, host, "true", append ? append : "");
  }
  ProcessSpec spec = command_spec("probe of " + host, argv, current_environment(), false);
  spec.log_path = "/dev/null";
  SupervisorOptions quiet{o.grace_period_s, false, "zerorun", true};
  return supervise_job({spec}, quiet).exit_code == 0;
}

std::string host_list(const std::vector<std::string>& hosts) {
  std::string out;
  for (const std::string& h : hosts) out += (out.empty() ? "" : ", ") + h;
  return out.empty() ? "none" : out;
}

int run(const Options& given) {
  const Options& o = given;
  std::optional<std::vector<HostEntry>> hostfile;
  if (o.world_info.empty()) {
    hostfile = read_hostfile(o.hostfile);
    if (!hostfile && o.hostfile_given)
      std::cerr << "zerorun: warning: hostfile " << o.hostfile
                << " not found; running with local resources only\n";
  }
  const LocalDevices local = detect_local_devices();
  EnvMap env = current_environment();
  // A zerorun that starts the whole job makes its secret; per-node invocations must share one
  // (and every restart keeps it).
  if (env[kJobTokenVar].empty()) {
    env.erase(kJobTokenVar);
    if (o.world_info.empty() && o.node_rank < 0)
      env[kJobTokenVar] = new_job_token();
    else if (o.world_info.empty())
      std::cerr << "zerorun: note: no " << kJobTokenVar
                << " in the environment: this node's ranks run without a job secret; export the "
                   "same token to every node's zerorun to have the rendezvous check it\n";
  }
  PidFile pid_file(o.save_pid);
  if (o.max_restarts == 0) {
    std::vector<std::string> nodes;
    return launch(o, hostfile, local, env, 0, true, &nodes).exit_code;
  }
  ZERO_CHECK(o.launcher != LauncherKind::kOpenMpi, UsageError,
             "zerorun: --max_restarts with --launcher openmpi: restarts are supported by the "
             "local, ssh, pdsh and slurm launchers");
  // Under Slurm srun starts every node alike (any may be dropped) and a host answers srun; with
  // ssh/pdsh node 0 is this machine, and its ranks are the first specs of a launch.
  const bool slurm = o.launcher == LauncherKind::kSlurm;
  ZERO_CHECK(o.node_rank < 0 && o.world_info.empty(), UsageError,
             "zerorun: --max_restarts needs the zerorun that starts every node (no --node_rank)");
  // The hosts the job may use, in hostfile order; with ssh/pdsh node 0 (this machine) is never
  // dropped. Without a hostfile the job runs where it ran (srun: its allocation) every time.
  std::vector<HostEntry> pool = hostfile ? *hostfile : std::vector<HostEntry>{};
  std::vector<bool> dropped(pool.size(), false);
  int first_failure = 0;
  for (int restart = 0;; ++restart) {
    std::optional<std::vector<HostEntry>> current;
    if (hostfile) {
      current.emplace();
      for (size_t h = 0; h < pool.size(); ++h) {
        if (dropped[h] && restart > 0 && (h > 0 || slurm) && host_answers(o, pool[h].host)) {
          dropped[h] = false;
          std::cerr << "zerorun: host " << pool[h].host << " answers again; it rejoins the job\n";
        }
        if (!dropped[h] && (o.max_nodes < 0 || static_cast<int>(current->size()) < o.max_nodes))
          current->push_back(pool[h]);
      }
      const int alive = static_cast<int>(current->size());
      if (alive < o.min_nodes) {
        std::cerr << "zerorun: " << alive << " host(s) left, fewer than --min_nodes " << o.min_nodes
                  << "; exiting with the first failure's code " << first_failure << "\n";
        return first_failure;
      }
    }
    std::vector<std::string> nodes;
    const bool last = restart == o.max_restarts;
    const Supervision result = launch(o, current, local, env, restart, false, &nodes);
    if (result.exit_code == 0) return 0;
    if (restart == 0) first_failure = result.exit_code;
    if (result.interrupted || last) {
      if (!result.interrupted)
        std::cerr << "zerorun: " << o.max_restarts << " restart(s) used up; exiting with the "
                  << "first failure's code " << first_failure << "\n";
      return result.interrupted ? result.exit_code : first_failure;
    }
    // A remote node fails when its ranks died or its launch failed (its ssh ended by itself), or
    // when it no longer answers; under Slurm (one srun for all) when it no longer answers srun.
    std::vector<std::string> lost;
    for (size_t n = slurm ? 0 : 1; hostfile && n < nodes.size(); ++n) {
      // ssh/pdsh: node n's spec follows node 0's ranks.
      const bool failed =
          (!slurm && result.failed_by_itself[n + result.failed_by_itself.size() - nodes.size()]) ||
          !host_answers(o, nodes[n]);
      if (!failed) continue;
      lost.push_back(nodes[n]);
      for (size_t h = 0; h < pool.size(); ++h)
        if (pool[h].host == nodes[n]) dropped[h] = true;
    }
    std::cerr << "zerorun: restart " << restart + 1 << " of " << o.max_restarts
              << " after exit code " << result.exit_code << "; hosts dropped: " << host_list(lost)
              << "\n";
  }
}
}  // namespace
}  // namespace zero::launcher

int main(int argc, char** argv) {
  using namespace zero::launcher;
  try {
    Options o = parse_options(std::vector<std::string>(argv + 1, argv + argc));
    if (o.help) {
      std::cout << usage_text();
      return 0;
    }
    if (o.check_build) {
      const char* path = std::getenv("PATH");
      std::cout << check_build_text(path ? path : "");
      return 0;
    }
    return run(o);
  } catch (const zero::UsageError& e) {
    std::cerr << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "zerorun: error: " << e.what() << "\n";
    return 1;
  }
}
