// Builds each rank's environment and argv, reads .deepspeed_env files and counts local GPUs.
#include "environment.h"

#include <dirent.h>

#include <cstring>
#include <fstream>
#include <sstream>

#include <zero/error.h>
#include <zero/text.h>

extern char** environ;

namespace zero::launcher {
namespace {

using ::zero::detail::trim;

void merge_env_file(const std::string& path, EnvMap* into) {
  std::ifstream in(path);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  for (auto& [k, v] : parse_env_file(text.str(), path)) (*into)[k] = v;
}

template <typename Pred>
int count_entries(const std::string& dir_path, Pred keep) {
  int n = 0;
  if (DIR* dir = opendir(dir_path.c_str())) {
    while (dirent* ent = readdir(dir)) n += keep(std::string(ent->d_name)) ? 1 : 0;
    closedir(dir);
  }
  return n;
}

}  // namespace

EnvMap current_environment() {
  EnvMap env;
  for (char** e = environ; e && *e; ++e) {
    const char* eq = std::strchr(*e, '=');
    if (eq) env[std::string(*e, static_cast<size_t>(eq - *e))] = eq + 1;
  }
  return env;
}

LocalDevices detect_local_devices(const std::string& proc_dir, const std::string& dev_dir) {
  LocalDevices d;
  d.gpu_count = count_entries(proc_dir, [](const std::string& name) { return name[0] != '.'; });
  if (d.gpu_count == 0)  // e.g. a container without /proc/driver/nvidia
    d.gpu_count = count_entries(dev_dir, [](const std::string& name) {
      return name.size() > 6 && name.rfind("nvidia", 0) == 0 &&
             name.find_first_not_of("0123456789", 6) == std::string::npos;
    });
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) d.cuda_visible_devices = trim(cvd);
  return d;
}

EnvMap parse_env_file(const std::string& text, const std::string& origin) {
  EnvMap env;
  std::istringstream in(text);
  std::string raw;
  for (int line_no = 1; std::getline(in, raw); ++line_no) {
    std::string line = trim(raw);
    if (line.empty() || line[0] == '#') continue;
    size_t eq = line.find('=');
    ZERO_CHECK(eq != std::string::npos && eq > 0, UsageError, "zerorun: ", origin, ":", line_no,
               ": expected KEY=VALUE, got '", line, "'");
    env[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
  }
  return env;
}

EnvMap collect_exports(const EnvMap& env, const std::string& home_dir, const std::string& cwd) {
  EnvMap exports;
  for (auto& [k, v] : env)
    for (const std::string& prefix : kExportPrefixes)
      if (k.rfind(prefix, 0) == 0) exports[k] = v;
  if (!home_dir.empty()) merge_env_file(home_dir + "/" + kEnvFileName, &exports);
  if (!cwd.empty() && cwd != home_dir) merge_env_file(cwd + "/" + kEnvFileName, &exports);
  return exports;
}

EnvMap build_rank_env(const EnvMap& base, const EnvMap& exports, const RankPlacement& p,
                      const std::string& master_addr, int master_port,
                      const std::string& visible_devices) {
  EnvMap env = base;
  for (auto& [k, v] : exports) env[k] = v;
  env["RANK"] = std::to_string(p.rank);
  env["LOCAL_RANK"] = std::to_string(p.local_rank);
  env["WORLD_SIZE"] = std::to_string(p.world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(p.local_world_size);
  env["MASTER_ADDR"] = master_addr;
  env["MASTER_PORT"] = std::to_string(master_port);
  // The names DeepSpeed's launch.py also sets.
  env["CROSS_RANK"] = std::to_string(p.node_rank);
  env["CROSS_SIZE"] = std::to_string(p.num_nodes);
  env["LOCAL_SIZE"] = std::to_string(p.local_world_size);
  if (!visible_devices.empty()) env["CUDA_VISIBLE_DEVICES"] = visible_devices;
  return env;
}

std::vector<std::string> rank_argv(const Options& options, int local_rank) {
  std::vector<std::string> argv{options.program};
  if (!options.no_local_rank) argv.push_back("--local_rank=" + std::to_string(local_rank));
  argv.insert(argv.end(), options.program_args.begin(), options.program_args.end());
  return argv;
}

std::string new_job_token() {
  unsigned char bytes[16];
  std::ifstream in("/dev/urandom", std::ios::binary);
  ZERO_CHECK(in.read(reinterpret_cast<char*>(bytes), sizeof(bytes)), InternalError,
             "zerorun: cannot read /dev/urandom for the job token");
  static const char* kHex = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) token += std::string{kHex[b >> 4], kHex[b & 15]};
  return token;
}

std::vector<std::string> to_envp(const EnvMap& env) {
  std::vector<std::string> out;
  out.reserve(env.size());
  for (auto& [k, v] : env) out.push_back(k + "=" + v);
  return out;
}

}  // namespace zero::launcher
