// The program zerorun starts in the launcher tests. Modes (after an optional --local_rank=N):
//   env DIR            write DIR/env_<rank>.txt (the launcher's variables, argv) and exit 0
//   echo               print lines on stdout and stderr (and a last line without newline)
//   fail DIR K CODE    write DIR/pid_<rank> and DIR/gpid_<rank> (a grandchild), then rank K
//                      exits CODE (CODE < 0: kills itself with signal -CODE) once every pid file
//                      exists; the others wait forever. `stubborn` is `fail` ignoring SIGTERM.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

namespace {

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

int my_rank() {
  const char* r = std::getenv("RANK");
  if (!r) r = std::getenv("OMPI_COMM_WORLD_RANK");
  return r ? std::atoi(r) : -1;
}

void write_file(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << text; }
  std::rename(tmp.c_str(), path.c_str());  // readers never see a half-written file
}

bool exists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0;
}

[[noreturn]] void wait_forever() {
  for (;;) pause();
}

int fail_mode(const std::string& dir, int failing, int code, bool stubborn) {
  if (stubborn) signal(SIGTERM, SIG_IGN);
  const int rank = my_rank(), world = std::atoi(env_or("WORLD_SIZE", "1").c_str());
  pid_t child = fork();
  if (child == 0) {
    write_file(dir + "/gpid_" + std::to_string(rank), std::to_string(getpid()));
    wait_forever();
  }
  write_file(dir + "/pid_" + std::to_string(rank), std::to_string(getpid()));
  if (rank != failing) wait_forever();
  for (int r = 0; r < world; ++r) {
    while (!exists(dir + "/pid_" + std::to_string(r)) ||
           !exists(dir + "/gpid_" + std::to_string(r)))
      usleep(10000);
  }
  if (code < 0) kill(getpid(), -code);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args;
  std::string local_rank_arg = "none";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("--local_rank=", 0) == 0)
      local_rank_arg = a.substr(13);
    else
      args.push_back(a);
  }
  if (args.empty()) return 64;
  const std::string mode = args[0];
  if (mode == "env" && args.size() >= 2) {
    std::string text;
    for (const char* name :
         {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
          "CUDA_VISIBLE_DEVICES", "ZERO_TEST_FORWARDED", "FROM_ENV_FILE", "OMPI_COMM_WORLD_RANK",
          "OMPI_COMM_WORLD_SIZE", "GLOO_SOCKET_IFNAME", "SSH_CONNECTION"})
      text += std::string(name) + "=" + env_or(name, "<unset>") + "\n";
    text += "LOCAL_RANK_ARG=" + local_rank_arg + "\nARGS=";
    for (size_t i = 2; i < args.size(); ++i) text += (i > 2 ? " " : "") + args[i];
    write_file(args[1] + "/env_" + std::to_string(my_rank()) + ".txt", text + "\n");
    return 0;
  }
  if (mode == "echo") {
    int rank = my_rank();
    std::printf("hello from %d\nsecond line from %d\n", rank, rank);
    std::fflush(stdout);
    std::fprintf(stderr, "warn from %d\n", rank);
    std::printf("no newline from %d", rank);
    return 0;
  }
  if ((mode == "fail" || mode == "stubborn") && args.size() == 4)
    return fail_mode(args[1], std::atoi(args[2].c_str()), std::atoi(args[3].c_str()),
                     mode == "stubborn");
  std::fprintf(stderr, "rank_prog: bad arguments\n");
  return 64;
}
