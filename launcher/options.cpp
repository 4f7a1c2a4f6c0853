// Parses zerorun's flags the way argparse parses DeepSpeed's: `--flag value` or `--flag=value`,
// the first word that is not a flag is the program and everything after it belongs to it.
#include "options.h"
#include "resources.h"

#include <cctype>
#include <cstdlib>
#include <functional>

#include <zero/error.h>

namespace zero::launcher {
namespace {

int to_int(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  ZERO_CHECK(!value.empty() && end && *end == '\0', UsageError, "zerorun: ", flag,
             " expects an integer, got '", value, "'");
  return static_cast<int>(v);
}

double to_double(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  double v = std::strtod(value.c_str(), &end);
  ZERO_CHECK(!value.empty() && end && *end == '\0' && v >= 0, UsageError, "zerorun: ", flag,
             " expects a non-negative number, got '", value, "'");
  return v;
}

LauncherKind to_launcher(const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "local") return LauncherKind::kLocal;
  if (v == "ssh") return LauncherKind::kSsh;
  if (v == "pdsh") return LauncherKind::kPdsh;
  if (v == "slurm") return LauncherKind::kSlurm;
  if (v == "openmpi") return LauncherKind::kOpenMpi;
  throw UsageError("zerorun: --launcher must be one of local, ssh, pdsh, slurm, openmpi; got '" +
                   value + "'");
}

struct Flag {
  std::vector<const char*> names;
  bool takes_value;
  std::function<void(Options&, const std::string&)> apply;
};

const std::vector<Flag>& flags() {
  static const std::vector<Flag> all = {
      {{"-H", "--hostfile"},
       true,
       [](Options& o, const std::string& v) { o.hostfile = v, o.hostfile_given = true; }},
      {{"-i", "--include"}, true, [](Options& o, const std::string& v) { o.include = v; }},
      {{"-e", "--exclude"}, true, [](Options& o, const std::string& v) { o.exclude = v; }},
      {{"--num_nodes"},
       true,
       [](Options& o, const std::string& v) { o.num_nodes = to_int("--num_nodes", v); }},
      {{"--num_gpus", "--num_accelerators", "--nproc_per_node"},
       true,
       [](Options& o, const std::string& v) { o.num_gpus = to_int("--num_gpus", v); }},
      {{"--master_addr"}, true, [](Options& o, const std::string& v) { o.master_addr = v; }},
      {{"--master_port"},
       true,
       [](Options& o, const std::string& v) { o.master_port = to_int("--master_port", v); }},
      {{"--node_rank"},
       true,
       [](Options& o, const std::string& v) { o.node_rank = to_int("--node_rank", v); }},
      {{"--launcher"}, true, [](Options& o, const std::string& v) { o.launcher = to_launcher(v); }},
      {{"--launcher_args"}, true, [](Options& o, const std::string& v) { o.launcher_args = v; }},
      {{"--ssh_port"},
       true,
       [](Options& o, const std::string& v) { o.ssh_port = to_int("--ssh_port", v); }},
      {{"--no_local_rank"}, false, [](Options& o, const std::string&) { o.no_local_rank = true; }},
      {{"--enable_each_rank_log"},
       true,
       [](Options& o, const std::string& v) { o.each_rank_log_dir = v == "None" ? "" : v; }},
      {{"--save_pid"}, false, [](Options& o, const std::string&) { o.save_pid = true; }},
      {{"--grace_period"},
       true,
       [](Options& o, const std::string& v) { o.grace_period_s = to_double("--grace_period", v); }},
      {{"--max_restarts"},
       true,
       [](Options& o, const std::string& v) { o.max_restarts = to_int("--max_restarts", v); }},
      {{"--min_nodes", "--min_elastic_nodes"},
       true,
       [](Options& o, const std::string& v) { o.min_nodes = to_int("--min_nodes", v); }},
      {{"--max_nodes", "--max_elastic_nodes"},
       true,
       [](Options& o, const std::string& v) { o.max_nodes = to_int("--max_nodes", v); }},
      {{"--no_ssh_check", "--no_python"}, false, [](Options&, const std::string&) {}},
      {{"--world_info"}, true, [](Options& o, const std::string& v) { o.world_info = v; }},
      {{"--exit_on_stdin_eof"},
       false,
       [](Options& o, const std::string&) { o.exit_on_stdin_eof = true; }},
      {{"-h", "--help"}, false, [](Options& o, const std::string&) { o.help = true; }},
      {{"--check-build", "--check_build", "-cb"},
       false,
       [](Options& o, const std::string&) { o.check_build = true; }},
  };
  return all;
}

}  // namespace

Options parse_options(const std::vector<std::string>& args) {
  Options o;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.empty() || arg[0] != '-' || arg == "-") break;  // the program
    std::string name = arg, value;
    bool has_inline_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos && arg.rfind("--", 0) == 0) {
      name = arg.substr(0, eq), value = arg.substr(eq + 1), has_inline_value = true;
    }
    const Flag* flag = nullptr;
    for (const Flag& f : flags())
      for (const char* n : f.names)
        if (name == n) flag = &f;
    ZERO_CHECK(flag, UsageError, "zerorun: unknown option '", name, "' (see zerorun --help)");
    if (flag->takes_value && !has_inline_value) {
      ZERO_CHECK(i + 1 < args.size(), UsageError, "zerorun: ", name, " needs a value");
      value = args[++i];
    }
    ZERO_CHECK(flag->takes_value || !has_inline_value, UsageError, "zerorun: ", name,
               " takes no value");
    flag->apply(o, value);
  }
  if (o.help || o.check_build) return o;
  ZERO_CHECK(i < args.size(), UsageError, "zerorun: missing PROGRAM (see zerorun --help)");
  o.program = args[i];
  o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  check_include_exclude(o.include, o.exclude);
  ZERO_CHECK(o.num_nodes == -1 || o.num_nodes > 0, UsageError,
             "zerorun: --num_nodes must be positive");
  ZERO_CHECK(o.num_gpus == -1 || o.num_gpus > 0, UsageError,
             "zerorun: --num_gpus must be positive");
  ZERO_CHECK(o.master_port > 0 && o.master_port < 65536, UsageError,
             "zerorun: --master_port must be in 1..65535");
  ZERO_CHECK(o.node_rank >= -1, UsageError, "zerorun: --node_rank must be >= 0");
  ZERO_CHECK(o.max_restarts >= 0, UsageError, "zerorun: --max_restarts must be >= 0");
  ZERO_CHECK(o.min_nodes >= 1 && (o.max_nodes == -1 || o.max_nodes >= o.min_nodes), UsageError,
             "zerorun: --min_nodes must be >= 1 and --max_nodes >= --min_nodes");
  return o;
}

const char* launcher_name(LauncherKind kind) {
  switch (kind) {
    case LauncherKind::kLocal:
      return "local";
    case LauncherKind::kSsh:
      return "ssh";
    case LauncherKind::kPdsh:
      return "pdsh";
    case LauncherKind::kSlurm:
      return "slurm";
    case LauncherKind::kOpenMpi:
      return "openmpi";
  }
  return "?";
}

std::string usage_text() {
  return R"(usage: zerorun [options] PROGRAM [ARGS...]

Starts one process per rank (like DeepSpeed's `deepspeed` launcher) and supervises them.
  -H, --hostfile F          hosts as `NAME slots=N` lines (default /job/hostfile; missing: this
                            machine only)
  -i, --include S           resources to use: NAME[:SLOT[,SLOT...]][@NAME...]
  -e, --exclude S           resources to leave out, same syntax
  --num_nodes N             use the first N hosts
  --num_gpus N, --nproc_per_node N
                            processes per node (default: hostfile slots, else the local GPUs,
                            else 1)
  --master_addr A           rendezvous address (default 127.0.0.1 on one node, else the first
                            host's name)
  --master_port P           rendezvous port (default 29500)
  --node_rank R             start only node R's ranks (one zerorun per node, torchrun style)
  --launcher L              local | ssh (default) | pdsh | slurm | openmpi
  --launcher_args S         extra arguments for ssh / pdsh / srun / mpirun (one quoted string)
  --ssh_port P              port of sshd on the other nodes
  --no_local_rank           do not append --local_rank=N to the program's arguments
  --enable_each_rank_log D  write each rank's output to D/rank_N.log instead of the terminal
  --save_pid                write /tmp/<pid>.zerorun holding zerorun's pid while it runs
  --grace_period S          seconds between SIGTERM and SIGKILL when tearing down (default 5)
  --max_restarts N          after a failure, relaunch the job up to N times on the hosts that
                            remain (ranks get ZERO_RESTART_COUNT; docs/elastic.md)
  --min_nodes A             stop instead when fewer than A hosts remain (default 1)
  --max_nodes B             use at most B hosts at once (default: all)
  --check-build             list the frameworks, controllers and backends of this build

Each rank gets RANK LOCAL_RANK WORLD_SIZE LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT (and
CUDA_VISIBLE_DEVICES on GPU nodes). When a rank fails, the others are stopped and zerorun exits
with the failing rank's code (128+signal for a signal). See docs/launcher.md.
)";
}

std::vector<std::string> split_shell_words(const std::string& text) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '\'') {
      size_t end = text.find('\'', i + 1);
      ZERO_CHECK(end != std::string::npos, UsageError, "unterminated ' in: ", text);
      cur += text.substr(i + 1, end - i - 1), i = end, in_word = true;
    } else if (c == '"') {
      in_word = true;
      for (++i; i < text.size() && text[i] != '"'; ++i) {
        if (text[i] == '\\' && i + 1 < text.size() &&
            (text[i + 1] == '"' || text[i + 1] == '\\' || text[i + 1] == '$' || text[i + 1] == '`'))
          ++i;
        cur += text[i];
      }
      ZERO_CHECK(i < text.size(), UsageError, "unterminated \" in: ", text);
    } else if (c == '\\') {
      ZERO_CHECK(i + 1 < text.size(), UsageError, "trailing \\ in: ", text);
      cur += text[++i], in_word = true;
    } else if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(cur), cur.clear(), in_word = false;
    } else {
      cur += c, in_word = true;
    }
  }
  if (in_word) words.push_back(cur);
  return words;
}

std::string shell_quote(const std::string& word) {
  if (!word.empty() &&
      word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "_-./:=@,+%") == std::string::npos)
    return word;
  std::string out = "'";
  for (char c : word) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_join(const std::vector<std::string>& words) {
  std::string out;
  for (const std::string& w : words) out += (out.empty() ? "" : " ") + shell_quote(w);
  return out;
}

}  // namespace zero::launcher
