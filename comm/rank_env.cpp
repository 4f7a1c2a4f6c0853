// Rank/env detection for env://, OpenMPI and Slurm launches, Slurm host-list expansion and the
// default collective timeout. Pure string handling: no torch, no sockets.
#include <zero/comm/process_group.h>
#include <zero/error.h>

#include <cctype>
#include <cstdlib>

namespace zero {

const char* to_string(LaunchSource source) {
  switch (source) {
    case LaunchSource::kEnv:
      return "env";
    case LaunchSource::kOpenMpi:
      return "openmpi";
    case LaunchSource::kSlurm:
      return "slurm";
    case LaunchSource::kSingle:
      return "single";
  }
  return "?";
}

namespace {

using GetEnv = std::function<const char*(const char*)>;

int parse_int(const char* name, const char* value, int min_value) {
  ZERO_CHECK(value && *value, ConfigError, "environment variable ", name, " is empty");
  char* end = nullptr;
  long v = std::strtol(value, &end, 10);
  ZERO_CHECK(end && *end == '\0' && v >= min_value && v <= (1L << 30), ConfigError,
             "environment variable ", name, "='", value, "' is not an integer >= ", min_value);
  return static_cast<int>(v);
}

int int_or(const GetEnv& env, const char* name, int fallback, int min_value) {
  const char* v = env(name);
  return (v && *v) ? parse_int(name, v, min_value) : fallback;
}

void check_consistent(const RankEnv& e, const char* how) {
  ZERO_CHECK(e.rank < e.world_size, ConfigError, how, ": rank ", e.rank, " >= world size ",
             e.world_size);
  ZERO_CHECK(e.local_rank < e.local_world_size, ConfigError, how, ": local rank ", e.local_rank,
             " >= local world size ", e.local_world_size);
  ZERO_CHECK(e.local_world_size <= e.world_size, ConfigError, how, ": local world size ",
             e.local_world_size, " > world size ", e.world_size);
  ZERO_CHECK(e.master_port > 0 && e.master_port < 65536, ConfigError, how, ": MASTER_PORT ",
             e.master_port, " is not a TCP port");
}

// Splits on commas that are not inside brackets.
std::vector<std::string> split_top_level(const std::string& s) {
  std::vector<std::string> parts;
  std::string cur;
  int depth = 0;
  for (char c : s) {
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) parts.push_back(cur);
  return parts;
}

// Expands one host expression that may hold several bracket groups: "a[1-2]b[3,5]".
void expand_host(const std::string& expr, std::vector<std::string>& out) {
  size_t open = expr.find('[');
  if (open == std::string::npos) {
    out.push_back(expr);
    return;
  }
  size_t close = expr.find(']', open);
  ZERO_CHECK(close != std::string::npos, ConfigError, "Slurm node list: unbalanced '[' in '", expr,
             "'");
  const std::string prefix = expr.substr(0, open), rest = expr.substr(close + 1);
  std::string ranges = expr.substr(open + 1, close - open - 1);
  size_t pos = 0;
  while (pos <= ranges.size()) {
    size_t comma = ranges.find(',', pos);
    std::string item =
        ranges.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? ranges.size() + 1 : comma + 1;
    if (item.empty()) continue;
    size_t dash = item.find('-');
    std::string lo = item.substr(0, dash),
                hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    bool digits = !lo.empty() && !hi.empty();
    for (char c : lo + hi) digits = digits && std::isdigit(static_cast<unsigned char>(c));
    ZERO_CHECK(digits, ConfigError, "Slurm node list: bad range '", item, "' in '", expr, "'");
    const long a = std::stol(lo), b = std::stol(hi);
    ZERO_CHECK(a <= b && b - a < 100000, ConfigError, "Slurm node list: bad range '", item, "'");
    for (long v = a; v <= b; ++v) {
      std::string num = std::to_string(v);
      if (num.size() < lo.size()) num.insert(0, lo.size() - num.size(), '0');  // keep zero padding
      expand_host(prefix + num + rest, out);
    }
  }
}

// Rank, world size, local rank and local world size from four variables; the local ones
// default to one node holding the whole job.
void read_ranks(const GetEnv& env, RankEnv& e, const char* rank, const char* size,
                const char* local_rank, const char* local_size) {
  e.rank = parse_int(rank, env(rank), 0);
  e.world_size = parse_int(size, env(size), 1);
  e.local_rank = int_or(env, local_rank, e.rank, 0);
  e.local_world_size = int_or(env, local_size, e.world_size, 1);
}

}  // namespace

namespace detail {

std::vector<std::string> expand_slurm_nodelist(const std::string& nodelist) {
  std::vector<std::string> hosts;
  for (const std::string& part : split_top_level(nodelist)) expand_host(part, hosts);
  return hosts;
}

std::vector<int> expand_slurm_tasks_per_node(const std::string& spec) {
  std::vector<int> out;
  for (const std::string& part : split_top_level(spec)) {
    size_t paren = part.find("(x");
    int count = parse_int("SLURM_TASKS_PER_NODE", part.substr(0, paren).c_str(), 0);
    int repeat = 1;
    if (paren != std::string::npos) {
      ZERO_CHECK(part.back() == ')', ConfigError, "SLURM_TASKS_PER_NODE: bad item '", part, "'");
      repeat = parse_int("SLURM_TASKS_PER_NODE",
                         part.substr(paren + 2, part.size() - paren - 3).c_str(), 1);
    }
    out.insert(out.end(), repeat, count);
  }
  return out;
}

RankEnv detect_rank_env(const GetEnv& env) {
  RankEnv e;
  auto has = [&](const char* name) {
    const char* v = env(name);
    return v && *v;
  };
  const char* addr = env("MASTER_ADDR");
  if (addr && *addr) e.master_addr = addr;
  e.master_port = int_or(env, "MASTER_PORT", 29500, 1);
  if (const char* token = env("ZERO_JOB_TOKEN"); token && *token) {
    e.job_token = token;
    ZERO_CHECK(e.job_token.size() >= 16, ConfigError, "ZERO_JOB_TOKEN has ", e.job_token.size(),
               " characters; use at least 16 random ones, e.g. $(od -An -N16 -tx1 /dev/urandom | "
               "tr -d ' \\n')");
  }

  if (has("RANK") && has("WORLD_SIZE")) {
    e.source = LaunchSource::kEnv;
    read_ranks(env, e, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE");
    check_consistent(e, "env:// (RANK/WORLD_SIZE)");
    return e;
  }
  ZERO_CHECK(!has("RANK") && !has("WORLD_SIZE"), ConfigError,
             "env://: RANK and WORLD_SIZE must be set together (RANK=",
             has("RANK") ? env("RANK") : "<unset>",
             ", WORLD_SIZE=", has("WORLD_SIZE") ? env("WORLD_SIZE") : "<unset>", ")");

  if (has("OMPI_COMM_WORLD_RANK") && has("OMPI_COMM_WORLD_SIZE")) {
    e.source = LaunchSource::kOpenMpi;
    read_ranks(env, e, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
               "OMPI_COMM_WORLD_LOCAL_SIZE");
    // OpenMPI does not say where rank 0 runs; on one node it is here.
    ZERO_CHECK(has("MASTER_ADDR") || e.local_world_size == e.world_size, ConfigError,
               "OpenMPI launch over several nodes: set MASTER_ADDR to rank 0's host "
               "(mpirun -x MASTER_ADDR=<host> -x MASTER_PORT=<port> ...)");
    check_consistent(e, "OpenMPI (OMPI_COMM_WORLD_*)");
    return e;
  }

  if (has("SLURM_PROCID") && (has("SLURM_NTASKS") || has("SLURM_NPROCS"))) {
    e.source = LaunchSource::kSlurm;
    e.rank = parse_int("SLURM_PROCID", env("SLURM_PROCID"), 0);
    e.world_size = has("SLURM_NTASKS") ? parse_int("SLURM_NTASKS", env("SLURM_NTASKS"), 1)
                                       : parse_int("SLURM_NPROCS", env("SLURM_NPROCS"), 1);
    e.local_rank = int_or(env, "SLURM_LOCALID", 0, 0);
    e.local_world_size = e.world_size;
    if (has("SLURM_TASKS_PER_NODE")) {
      std::vector<int> per_node = expand_slurm_tasks_per_node(env("SLURM_TASKS_PER_NODE"));
      const int node = int_or(env, "SLURM_NODEID", 0, 0);
      ZERO_CHECK(node < static_cast<int>(per_node.size()), ConfigError, "SLURM_NODEID ", node,
                 " is outside SLURM_TASKS_PER_NODE='", env("SLURM_TASKS_PER_NODE"), "'");
      e.local_world_size = per_node[node];
    }
    if (!has("MASTER_ADDR")) {
      const char* list =
          has("SLURM_JOB_NODELIST") ? env("SLURM_JOB_NODELIST") : env("SLURM_NODELIST");
      if (list && *list) {
        std::vector<std::string> hosts = expand_slurm_nodelist(list);
        ZERO_CHECK(!hosts.empty(), ConfigError, "Slurm node list '", list, "' names no host");
        e.master_addr = hosts.front();
      }
    }
    check_consistent(e, "Slurm (SLURM_*)");
    return e;
  }
  return e;
}

}  // namespace detail

RankEnv detect_rank_env() {
  return detail::detect_rank_env([](const char* name) { return std::getenv(name); });
}

std::chrono::milliseconds default_timeout() {
  const char* v = std::getenv("ZERO_TIMEOUT");
  if (!v || !*v) return std::chrono::minutes(10);
  char* end = nullptr;
  double seconds = std::strtod(v, &end);
  ZERO_CHECK(end && *end == '\0' && seconds > 0, ConfigError, "ZERO_TIMEOUT='", v,
             "': expected a positive number of seconds");
  return std::chrono::milliseconds(static_cast<long long>(seconds * 1000.0 + 0.5));
}

}  // namespace zero
