// Runs and supervises the local processes of a job (ranks, or ssh/pdsh/srun/mpirun commands):
// own process groups, prefixed output, signal forwarding, fail-fast teardown, no orphans.
#pragma once

#include <string>
#include <vector>

namespace zero::launcher {

struct ProcessSpec {
  std::string label;   // for messages: "rank 3", "node 1 (ssh host2)"
  std::string prefix;  // put before every output line: "[rank 3] "; empty passes lines through
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::vector<std::string> envp;  // the complete environment, "KEY=VALUE"
  std::string log_path;           // non-empty: stdout and stderr go to this file instead
  // stdin: /dev/null, or a pipe zerorun keeps open and never writes (an ssh child then sees EOF,
  // and its remote zerorun stops, when this zerorun dies).
  bool stdin_held_pipe = false;
};

struct SupervisorOptions {
  double grace_period_s = 5.0;     // SIGTERM -> SIGKILL
  bool exit_on_stdin_eof = false;  // our stdin closing (ssh connection lost) tears the job down
  std::string name = "zerorun";    // how zerorun's own messages start: "zerorun[node 1]"
  bool last_attempt = true;        // false: a failure is followed by a restart, not zerorun's exit
};

// Starts every process, then waits until all have ended. The first process that exits non-zero
// or by a signal makes the others get SIGTERM (SIGKILL after the grace period); SIGINT/SIGTERM/
// SIGHUP to zerorun are forwarded the same way (a second one sends SIGKILL at once).
// Returns 0, the first failure's exit code (128+signal for a signal), or 128+signal received.
// A guard process SIGKILLs every process group of the job if zerorun itself is SIGKILLed.
int supervise(const std::vector<ProcessSpec>& specs, const SupervisorOptions& options);

// What a supervised job's end says about its processes (for --max_restarts).
struct Supervision {
  int exit_code = 0;
  // Per spec: it failed by itself (could not start, or exited non-zero or by a signal before the
  // teardown began), not because zerorun stopped it.
  std::vector<bool> failed_by_itself;
  // zerorun itself was told to stop (a signal, or its stdin closed): no restart.
  bool interrupted = false;
};
Supervision supervise_job(const std::vector<ProcessSpec>& specs, const SupervisorOptions& options);

// "SIGTERM", "SIGKILL", ... or "signal N".
std::string signal_name(int sig);

}  // namespace zero::launcher
