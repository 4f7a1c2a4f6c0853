// zerorun with real processes: fail-fast with the failing rank's code, signals reaching every
// rank, no orphans (also when zerorun is SIGKILLed), env/--local_rank, output prefixes, per-rank
// logs, --save_pid, two zerorun invocations forming one job, the mpirun path.
#include <catch2/catch.hpp>

#include "skip.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/zerorun_test_XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::system(("rm -rf '" + path + "'").c_str()); }
};

// A zerorun process with stdout/stderr captured into files.
struct Run {
  pid_t pid = -1;
  std::string out_path, err_path;
  int status = -1;
  double seconds = 0;
  Clock::time_point started;

  Run(const std::vector<std::string>& args, const std::string& dir, const std::string& tag,
      const std::string& cwd = "") {
    out_path = dir + "/" + tag + ".out", err_path = dir + "/" + tag + ".err";
    started = Clock::now();
    pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      dup2(out, 1), dup2(err, 2);
      if (!cwd.empty() && chdir(cwd.c_str()) != 0) _exit(99);
      std::vector<char*> argv{const_cast<char*>(ZERORUN_BIN)};
      for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(ZERORUN_BIN, argv.data());
      _exit(98);
    }
  }
  // Waits up to `limit_s`; returns false (and kills it) when it did not finish in time.
  bool wait(double limit_s) {
    for (;;) {
      pid_t r = waitpid(pid, &status, WNOHANG);
      seconds = std::chrono::duration<double>(Clock::now() - started).count();
      if (r == pid) return true;
      if (seconds > limit_s) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  int exit_code() const { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }
  std::string out() const { return read_file(out_path); }
  std::string err() const { return read_file(err_path); }
};

// Alive = exists and is not a zombie (orphaned zombies may linger under a non-reaping init).
bool alive(pid_t pid) {
  std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (stat.empty()) return false;
  size_t paren = stat.rfind(')');
  char state = paren + 2 < stat.size() ? stat[paren + 2] : '?';
  return state != 'Z' && state != 'X';
}

// Pids written by rank_prog's fail/stubborn modes: pid_<r> and gpid_<r> for every rank.
std::vector<pid_t> job_pids(const std::string& dir, int world) {
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r)
    for (const char* kind : {"pid_", "gpid_"}) {
      std::string text = read_file(dir + "/" + kind + std::to_string(r));
      if (!text.empty()) pids.push_back(std::stoi(text));
    }
  return pids;
}

bool wait_for_pid_files(const std::string& dir, int world, double limit_s) {
  auto t0 = Clock::now();
  while (job_pids(dir, world).size() < static_cast<size_t>(2 * world)) {
    if (std::chrono::duration<double>(Clock::now() - t0).count() > limit_s) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

int count_alive(const std::vector<pid_t>& pids) {
  int n = 0;
  for (pid_t p : pids) n += alive(p);
  return n;
}

// Waits (briefly) for processes that are already being torn down.
int alive_after(const std::vector<pid_t>& pids, double limit_s) {
  auto t0 = Clock::now();
  while (count_alive(pids) > 0 &&
         std::chrono::duration<double>(Clock::now() - t0).count() < limit_s)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  return count_alive(pids);
}

std::map<std::string, std::string> parse_env(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line))
    if (size_t eq = line.find('='); eq != std::string::npos)
      kv[line.substr(0, eq)] = line.substr(eq + 1);
  return kv;
}

const std::string kRank = RANK_PROG;

}  // namespace

TEST_CASE("a rank exiting 7 stops the job: zerorun exits 7, nothing remains", "[failure]") {
  TempDir t;
  Run run({"--num_gpus", "3", "--master_port", "29701", kRank, "fail", t.path, "1", "7"}, t.path,
          "z");
  REQUIRE(run.wait(35));
  CHECK(run.exit_code() == 7);
  CHECK(run.seconds < 35);
  auto pids = job_pids(t.path, 3);
  CHECK(pids.size() == 6);
  CHECK(count_alive(pids) == 0);
  CHECK_THAT(run.err(), Catch::Contains("rank 1") && Catch::Contains("exited with code 7"));
}

TEST_CASE("a rank killed by a signal: exit code 128+signal, named in the message", "[failure]") {
  TempDir t;
  Run run({"--num_gpus", "2", "--master_port", "29702", kRank, "fail", t.path, "0", "-9"}, t.path,
          "z");
  REQUIRE(run.wait(35));
  CHECK(run.exit_code() == 128 + 9);
  CHECK(count_alive(job_pids(t.path, 2)) == 0);
  CHECK_THAT(run.err(), Catch::Contains("rank 0") && Catch::Contains("SIGKILL"));
}

TEST_CASE("ranks ignoring SIGTERM get SIGKILL after the grace period", "[failure]") {
  TempDir t;
  Run run({"--num_gpus", "3", "--grace_period", "1", "--master_port", "29703", kRank, "stubborn",
           t.path, "2", "3"},
          t.path, "z");
  REQUIRE(run.wait(35));
  CHECK(run.exit_code() == 3);
  CHECK(run.seconds >= 1.0);  // the grace period was honoured before SIGKILL
  auto pids = job_pids(t.path, 3);
  CHECK(pids.size() == 6);
  CHECK(count_alive(pids) == 0);
}

TEST_CASE("ranks failing at once: the first failure counts, no signal is imagined", "[failure]") {
  // Regression: a rank signalled between fork and exec must not run zerorun's handler.
  TempDir t;
  for (int i = 0; i < 5; ++i) {
    Run run({"--num_gpus", "4", kRank, "no-such-mode"}, t.path, "z" + std::to_string(i));
    REQUIRE(run.wait(35));
    CHECK(run.exit_code() == 64);
    CHECK_THAT(run.err(), Catch::Contains("exited with code 64") && !Catch::Contains("got SIG"));
  }
}

TEST_CASE("a program that cannot be executed fails with 127", "[failure]") {
  TempDir t;
  Run run({"--num_gpus", "2", "/nonexistent/zerorun/program"}, t.path, "z");
  REQUIRE(run.wait(35));
  CHECK(run.exit_code() == 127);
  CHECK_THAT(run.err(), Catch::Contains("[rank ") && Catch::Contains("cannot execute"));
  Run bad({"--no_such_flag", "x"}, t.path, "bad");
  REQUIRE(bad.wait(10));
  CHECK(bad.exit_code() == 2);
  CHECK_THAT(bad.err(), Catch::Contains("unknown option '--no_such_flag'"));
}

TEST_CASE("SIGTERM and SIGINT to zerorun reach every rank; --save_pid", "[signals]") {
  for (int sig : {SIGTERM, SIGINT}) {
    TempDir t;
    Run run({"--num_gpus", "3", "--save_pid", "--master_port", "29704", kRank, "fail", t.path, "-1",
             "0"},
            t.path, "z");
    REQUIRE(wait_for_pid_files(t.path, 3, 20));
    const std::string pid_file = "/tmp/" + std::to_string(run.pid) + ".zerorun";
    CHECK(read_file(pid_file) == std::to_string(run.pid));
    kill(run.pid, sig);
    REQUIRE(run.wait(30));
    CHECK(run.exit_code() == 128 + sig);
    CHECK(count_alive(job_pids(t.path, 3)) == 0);
    struct stat st {};
    CHECK(stat(pid_file.c_str(), &st) != 0);  // removed at exit
  }
}

TEST_CASE("SIGKILL to zerorun leaves no orphans", "[signals]") {
  TempDir t;
  Run run({"--num_gpus", "2", "--master_port", "29705", kRank, "fail", t.path, "-1", "0"}, t.path,
          "z");
  REQUIRE(wait_for_pid_files(t.path, 2, 20));
  auto pids = job_pids(t.path, 2);
  CHECK(count_alive(pids) == 4);
  kill(run.pid, SIGKILL);
  REQUIRE(run.wait(10));
  CHECK(alive_after(pids, 10) == 0);
}

TEST_CASE("each rank's environment and --local_rank", "[env]") {
  TempDir t;
  {
    std::ofstream(t.path + "/.deepspeed_env")
        << "# forwarded to every node\nFROM_ENV_FILE=yes it is\n";
  }
  setenv("ZERO_TEST_FORWARDED", "fwd", 1);
  Run run({"--num_gpus", "3", "--master_port", "29706", kRank, "env", t.path, "a", "b c"}, t.path,
          "z", t.path);
  REQUIRE(run.wait(30));
  REQUIRE(run.exit_code() == 0);
  for (int r = 0; r < 3; ++r) {
    auto kv = parse_env(read_file(t.path + "/env_" + std::to_string(r) + ".txt"));
    CHECK(kv["RANK"] == std::to_string(r));
    CHECK(kv["LOCAL_RANK"] == std::to_string(r));
    CHECK(kv["LOCAL_RANK_ARG"] == std::to_string(r));
    CHECK(kv["WORLD_SIZE"] == "3");
    CHECK(kv["LOCAL_WORLD_SIZE"] == "3");
    CHECK(kv["MASTER_ADDR"] == "127.0.0.1");
    CHECK(kv["MASTER_PORT"] == "29706");
    CHECK(kv["ZERO_TEST_FORWARDED"] == "fwd");
    CHECK(kv["FROM_ENV_FILE"] == "yes it is");
    CHECK(kv["ARGS"] == "a b c");
  }
  TempDir t2;
  Run quiet({"--no_local_rank", "--master_addr", "10.1.2.3", kRank, "env", t2.path}, t2.path, "z");
  REQUIRE(quiet.wait(30));
  REQUIRE(quiet.exit_code() == 0);
  auto kv = parse_env(read_file(t2.path + "/env_0.txt"));
  CHECK(kv["LOCAL_RANK_ARG"] == "none");
  CHECK(kv["WORLD_SIZE"] == "1");  // no GPUs here and no hostfile: one process
  CHECK(kv["MASTER_ADDR"] == "10.1.2.3");
  CHECK(kv["MASTER_PORT"] == "29500");
}

TEST_CASE("output lines are prefixed per rank, stdout and stderr kept apart", "[output]") {
  TempDir t;
  Run run({"--num_gpus", "2", kRank, "echo"}, t.path, "z");
  REQUIRE(run.wait(30));
  REQUIRE(run.exit_code() == 0);
  const std::string out = run.out(), err = run.err();
  for (int r = 0; r < 2; ++r) {
    std::string p = "[rank " + std::to_string(r) + "] ";
    CHECK_THAT(out, Catch::Contains(p + "hello from " + std::to_string(r) + "\n"));
    CHECK_THAT(out, Catch::Contains(p + "second line from " + std::to_string(r) + "\n"));
    CHECK_THAT(out, Catch::Contains(p + "no newline from " + std::to_string(r) + "\n"));
    CHECK_THAT(err, Catch::Contains(p + "warn from " + std::to_string(r) + "\n"));
  }
  CHECK_THAT(out, !Catch::Contains("warn from"));
  CHECK_THAT(err, !Catch::Contains("hello from"));
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    CHECK((line.rfind("[rank 0] ", 0) == 0 || line.rfind("[rank 1] ", 0) == 0));
}

TEST_CASE("--enable_each_rank_log writes DIR/rank_N.log", "[output]") {
  TempDir t;
  const std::string logs = t.path + "/logs/deeper";
  Run run({"--num_gpus", "2", "--enable_each_rank_log", logs, kRank, "echo"}, t.path, "z");
  REQUIRE(run.wait(30));
  REQUIRE(run.exit_code() == 0);
  for (int r = 0; r < 2; ++r) {
    std::string log = read_file(logs + "/rank_" + std::to_string(r) + ".log");
    CHECK_THAT(log, Catch::Contains("hello from " + std::to_string(r)));
    CHECK_THAT(log, Catch::Contains("warn from " + std::to_string(r)));
  }
  CHECK_THAT(run.out(), !Catch::Contains("hello from"));
}

TEST_CASE("two zerorun invocations (--node_rank 0 and 1) form one 4-rank job", "[multinode]") {
  TempDir t;
  { std::ofstream(t.path + "/hostfile") << "localhost slots=2\n127.0.0.1 slots=2\n"; }
  std::vector<std::string> common = {
      "--hostfile",    t.path + "/hostfile", "--num_nodes",   "2",
      "--master_addr", "127.0.0.1",          "--master_port", "29710"};
  auto args = [&](int node) {
    std::vector<std::string> a = common;
    a.insert(a.end(), {"--node_rank", std::to_string(node), RDZV_PROG});
    return a;
  };
  Run node1(args(1), t.path, "n1");  // the non-master node first: it must wait for rank 0
  Run node0(args(0), t.path, "n0");
  REQUIRE(node0.wait(60));
  REQUIRE(node1.wait(60));
  CHECK(node0.exit_code() == 0);
  CHECK(node1.exit_code() == 0);
  const std::string out0 = node0.out(), out1 = node1.out();
  CHECK_THAT(out0, Catch::Contains("[rank 0] rdzv ok rank 0 of 4 local 0"));
  CHECK_THAT(out0, Catch::Contains("[rank 1] rdzv ok rank 1 of 4 local 1"));
  CHECK_THAT(out1, Catch::Contains("[rank 2] rdzv ok rank 2 of 4 local 0"));
  CHECK_THAT(out1, Catch::Contains("[rank 3] rdzv ok rank 3 of 4 local 1"));
  INFO(node0.err() + node1.err());
}

TEST_CASE("--launcher openmpi runs the job under mpirun", "[openmpi]") {
  // zerorun starts `mpirun` through PATH (execvpe), so the test looks where it will.
  bool found = false;
  std::istringstream path(std::getenv("PATH") ? std::getenv("PATH") : "");
  for (std::string dir; !found && std::getline(path, dir, ':');)
    found = !dir.empty() && access((dir + "/mpirun").c_str(), X_OK) == 0;
  if (!found) {
    zero::test_support::skip("no mpirun on PATH (scripts/setup.sh installs openmpi-bin)");
    return;
  }
  TempDir t;
  setenv("ZERO_TEST_FORWARDED", "via-mpirun", 1);
  Run run({"--launcher", "openmpi", "--num_gpus", "2", "--master_port", "29711", "--launcher_args",
           "--oversubscribe --allow-run-as-root", kRank, "env", t.path},
          t.path, "z");
  REQUIRE(run.wait(60));
  INFO(run.err());
  REQUIRE(run.exit_code() == 0);
  for (int r = 0; r < 2; ++r) {
    auto kv = parse_env(read_file(t.path + "/env_" + std::to_string(r) + ".txt"));
    CHECK(kv["OMPI_COMM_WORLD_RANK"] == std::to_string(r));
    CHECK(kv["OMPI_COMM_WORLD_SIZE"] == "2");
    CHECK(kv["ZERO_TEST_FORWARDED"] == "via-mpirun");
    CHECK(kv["MASTER_PORT"] == "29711");
    CHECK(kv["MASTER_ADDR"] == "127.0.0.1");
    CHECK(kv["RANK"] == "<unset>");  // ranks detect themselves from OMPI_COMM_WORLD_*
  }
}
