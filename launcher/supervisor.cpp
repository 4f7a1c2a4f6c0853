// Process supervision for zerorun: fork/exec into own process groups, PR_SET_PDEATHSIG, a guard
// process for the case zerorun is SIGKILLed, poll() over output pipes and a signal self-pipe.
#include "supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <set>

#include <zero/error.h>

namespace zero::launcher {
namespace {

constexpr size_t kMaxLineBytes = 64 * 1024;  // longer lines are cut and prefixed in pieces
constexpr int kHandledSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGCHLD};
int g_signal_pipe[2] = {-1, -1};
std::string g_name = "zerorun";
bool g_handled[NSIG] = {};  // signals zerorun catches (not those it inherited as ignored: nohup)

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = write(g_signal_pipe[1], &byte, 1);  // full pipe: the loop is awake anyway
  (void)ignored;
  errno = saved;
}

double now_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        pollfd p{fd, POLLOUT, 0};
        poll(&p, 1, 100);
        continue;
      }
      return;  // EPIPE and friends: the reader went away; the job goes on
    }
    data += w, n -= static_cast<size_t>(w);
  }
}

void say(const std::string& message) {
  std::string line = g_name + ": " + message + "\n";
  write_all(2, line.data(), line.size());
}

void make_pipe(int fds[2]) {
  ZERO_CHECK(pipe2(fds, O_CLOEXEC) == 0, InternalError, "zerorun: pipe: ", std::strerror(errno));
}

// A forked helper in its own session that SIGKILLs every registered process group when the
// pipe from zerorun closes without the "done" message, i.e. when zerorun died abruptly.
class Guard {
 public:
  void start() {
    int fds[2];
    make_pipe(fds);
    sigset_t all, saved;  // blocked until the guard has its own dispositions (see spawn)
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &saved);
    pid_ = fork();
    if (pid_ != 0) sigprocmask(SIG_SETMASK, &saved, nullptr);
    ZERO_CHECK(pid_ >= 0, InternalError, "zerorun: fork: ", std::strerror(errno));
    if (pid_ == 0) run(fds[0]);
    close(fds[0]);
    fd_ = fds[1];
  }
  void add(pid_t pgid) { send(static_cast<int32_t>(pgid)); }
  void remove(pid_t pgid) { send(-static_cast<int32_t>(pgid)); }
  void release() {
    send(0);
    if (fd_ >= 0) close(fd_), fd_ = -1;
    if (pid_ > 0) waitpid(pid_, nullptr, 0), pid_ = -1;
  }
  pid_t pid() const { return pid_; }
  void forget() { pid_ = -1; }  // it was reaped elsewhere

 private:
  void send(int32_t message) {
    if (fd_ >= 0) write_all(fd_, reinterpret_cast<const char*>(&message), sizeof(message));
  }
  [[noreturn]] static void run(int fd) {
    setsid();  // out of zerorun's process group: a kill of that group must not take us along
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGPIPE}) signal(sig, SIG_IGN);
    signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    int null_fd = open("/dev/null", O_RDWR);
    for (int i = 0; i < 3 && null_fd >= 0; ++i) dup2(null_fd, i);
    for (int i = 3; i < 1024; ++i)
      if (i != fd) close(i);
    std::set<pid_t> groups;
    int32_t message = 0;
    for (;;) {
      ssize_t r = read(fd, &message, sizeof(message));
      if (r < 0 && errno == EINTR) continue;
      if (r != static_cast<ssize_t>(sizeof(message))) break;  // EOF: zerorun is gone
      if (message == 0) _exit(0);
      if (message > 0)
        groups.insert(message);
      else
        groups.erase(-message);
    }
    for (pid_t g : groups) kill(-g, SIGKILL);
    _exit(0);
  }
  int fd_ = -1;
  pid_t pid_ = -1;
};

struct Stream {
  int fd = -1;     // read end of the child's pipe; -1 once closed
  int out_fd = 1;  // where its lines go
  std::string pending;
};

struct Child {
  const ProcessSpec* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int stdin_hold_fd = -1;
  Stream out, err;
};

void emit_lines(Stream& s, const std::string& prefix, bool at_eof) {
  std::string text;
  size_t start = 0;
  for (;;) {
    size_t nl = s.pending.find('\n', start);
    if (nl == std::string::npos) {
      if (s.pending.size() - start < kMaxLineBytes && !(at_eof && start < s.pending.size())) break;
      nl = std::min(s.pending.size(), start + kMaxLineBytes);
      text += prefix + s.pending.substr(start, nl - start) + "\n";
      start = nl;
      continue;
    }
    text += prefix + s.pending.substr(start, nl - start + 1);
    start = nl + 1;
  }
  s.pending.erase(0, start);
  if (!text.empty()) write_all(s.out_fd, text.data(), text.size());
}

void drain(Stream& s, const std::string& prefix) {
  char buf[65536];
  while (s.fd >= 0) {
    ssize_t r = read(s.fd, buf, sizeof(buf));
    if (r > 0) {
      s.pending.append(buf, static_cast<size_t>(r));
      emit_lines(s, prefix, false);
    } else if (r < 0 && errno == EINTR) {
      continue;
    } else if (r < 0 && errno == EAGAIN) {
      return;
    } else {  // EOF or an error: flush what is left
      emit_lines(s, prefix, true);
      close(s.fd), s.fd = -1;
    }
  }
}

std::vector<char*> c_strings(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (const std::string& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

void spawn(Child& c, Guard& guard) {
  const ProcessSpec& spec = *c.spec;
  ZERO_CHECK(!spec.argv.empty(), InternalError, "zerorun: empty argv for ", spec.label);
  int out[2] = {-1, -1}, err[2] = {-1, -1}, in[2] = {-1, -1};
  if (spec.log_path.empty()) {
    make_pipe(out), make_pipe(err);
  } else {
    out[1] = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ZERO_CHECK(out[1] >= 0, UsageError, "zerorun: cannot open ", spec.log_path, ": ",
               std::strerror(errno));
    err[1] = out[1];
  }
  if (spec.stdin_held_pipe) {
    make_pipe(in);
  } else {
    in[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
  }
  std::vector<char*> argv = c_strings(spec.argv), envp = c_strings(spec.envp);
  const pid_t parent = getpid();
  // Signals stay blocked across fork until the child has dropped zerorun's handlers: a handler
  // running in the child would write into the inherited self-pipe and fool the parent.
  sigset_t all, saved;
  sigfillset(&all);
  sigprocmask(SIG_BLOCK, &all, &saved);
  pid_t pid = fork();
  if (pid != 0) sigprocmask(SIG_SETMASK, &saved, nullptr);
  ZERO_CHECK(pid >= 0, InternalError, "zerorun: fork: ", std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);  // own group: teardown reaches grandchildren; Ctrl-C goes through zerorun
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(137);  // zerorun died before prctl took effect
    for (int sig : kHandledSignals)
      if (g_handled[sig]) signal(sig, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    if (in[0] >= 0) dup2(in[0], 0);
    dup2(out[1], 1);
    dup2(err[1], 2);
    execvpe(argv[0], argv.data(), envp.data());
    std::string msg =
        "zerorun: cannot execute '" + spec.argv[0] + "': " + std::strerror(errno) + "\n";
    write_all(2, msg.data(), msg.size());
    _exit(127);
  }
  setpgid(pid, pid);  // also here, so the group exists before we may signal it
  guard.add(pid);
  c.pid = pid, c.running = true;
  if (in[0] >= 0) close(in[0]);
  c.stdin_hold_fd = in[1];
  close(out[1]);
  if (err[1] != out[1]) close(err[1]);
  if (spec.log_path.empty()) {
    c.out = Stream{out[0], 1, {}}, c.err = Stream{err[0], 2, {}};
    fcntl(out[0], F_SETFL, O_NONBLOCK), fcntl(err[0], F_SETFL, O_NONBLOCK);
  }
}

std::string describe_status(int status) {
  if (WIFSIGNALED(status)) return "was killed by " + signal_name(WTERMSIG(status));
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP:
      return "SIGHUP";
    case SIGINT:
      return "SIGINT";
    case SIGQUIT:
      return "SIGQUIT";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGKILL:
      return "SIGKILL";
    case SIGSEGV:
      return "SIGSEGV";
    case SIGPIPE:
      return "SIGPIPE";
    case SIGTERM:
      return "SIGTERM";
    case SIGUSR1:
      return "SIGUSR1";
    case SIGUSR2:
      return "SIGUSR2";
    default:
      return "signal " + std::to_string(sig);
  }
}

int supervise(const std::vector<ProcessSpec>& specs, const SupervisorOptions& options) {
  return supervise_job(specs, options).exit_code;
}

Supervision supervise_job(const std::vector<ProcessSpec>& specs, const SupervisorOptions& options) {
  Supervision result;
  result.failed_by_itself.assign(specs.size(), false);
  signal(SIGPIPE, SIG_IGN);
  g_name = options.name;
  ZERO_CHECK(pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) == 0, InternalError,
             "zerorun: pipe: ", std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : kHandledSignals) {
    struct sigaction old {};
    sigaction(sig, nullptr, &old);
    if (sig != SIGCHLD && old.sa_handler == SIG_IGN) continue;  // e.g. SIGHUP under nohup
    sigaction(sig, &sa, nullptr);
    g_handled[sig] = true;
  }

  // Orphaned grandchildren come to us (not to an init that may never reap them) and are reaped
  // by the loop below like any unknown child.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  Guard guard;
  guard.start();
  std::vector<Child> children(specs.size());
  int exit_code = 0;
  bool tearing_down = false, killed = false, stdin_open = options.exit_on_stdin_eof;
  double kill_deadline = std::numeric_limits<double>::infinity();
  double drain_deadline = kill_deadline;
  std::string failure;

  auto signal_all = [&](int sig) {
    for (Child& c : children)
      if (c.running) kill(-c.pid, sig);
  };
  auto teardown = [&](int sig) {
    tearing_down = true;
    signal_all(sig);
    kill_deadline = now_s() + options.grace_period_s;
  };

  for (size_t i = 0; i < specs.size() && !tearing_down; ++i) {
    children[i].spec = &specs[i];
    try {
      spawn(children[i], guard);
    } catch (const Error& e) {
      std::string msg = std::string(e.what()) + "\n";  // already starts with "zerorun: "
      write_all(2, msg.data(), msg.size());
      exit_code = 1, failure = specs[i].label + " could not be started";
      result.failed_by_itself[i] = true;
      teardown(SIGTERM);
    }
  }

  for (;;) {
    // Reap whatever ended. WNOWAIT first: the zombie keeps its pid, so its process group id
    // cannot be reused while we SIGKILL the group's leftovers (grandchildren).
    for (;;) {
      siginfo_t info{};
      if (waitid(P_ALL, 0, &info, WEXITED | WNOHANG | WNOWAIT) != 0 || info.si_pid == 0) break;
      pid_t pid = info.si_pid;
      Child* c = nullptr;
      for (Child& ch : children)
        if (ch.running && ch.pid == pid) c = &ch;
      if (c) kill(-pid, SIGKILL);
      int status = 0;
      waitpid(pid, &status, 0);
      if (pid == guard.pid()) {
        guard.forget();
        say("warning: the guard process ended early (" + describe_status(status) + ")");
      }
      if (!c) continue;
      c->running = false;
      guard.remove(pid);
      if (c->stdin_hold_fd >= 0) close(c->stdin_hold_fd), c->stdin_hold_fd = -1;
      bool failed = !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
      if (failed && !tearing_down) {
        result.failed_by_itself[static_cast<size_t>(c - children.data())] = true;
        exit_code = WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
        failure = c->spec->label + " (pid " + std::to_string(pid) + ") " + describe_status(status);
        say(failure + "; stopping the other processes");
        teardown(SIGTERM);
      }
    }

    bool any_running = false, any_stream = false;
    for (Child& c : children) {
      any_running |= c.running;
      any_stream |= c.out.fd >= 0 || c.err.fd >= 0;
    }
    const double now = now_s();
    if (!any_running) {
      if (!any_stream) break;
      // Something outside the process groups still holds a pipe: give it a moment, then stop.
      if (drain_deadline == std::numeric_limits<double>::infinity()) drain_deadline = now + 1.0;
      if (now >= drain_deadline) break;
    }
    if (tearing_down && !killed && now >= kill_deadline) {
      signal_all(SIGKILL);
      killed = true;
    }

    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    if (stdin_open) fds.push_back({0, POLLIN, 0});
    std::vector<std::pair<Stream*, const std::string*>> streams;
    for (Child& c : children)
      for (Stream* s : {&c.out, &c.err})
        if (s->fd >= 0) fds.push_back({s->fd, POLLIN, 0}), streams.push_back({s, &c.spec->prefix});
    double wait_s = 1.0;  // also a safety net should a SIGCHLD ever be missed
    if (tearing_down && !killed) wait_s = std::min(wait_s, kill_deadline - now);
    if (!any_running) wait_s = std::min(wait_s, drain_deadline - now);
    int timeout_ms = static_cast<int>(std::ceil(std::max(0.0, wait_s) * 1000.0));
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR)
      throw InternalError(std::string("zerorun: poll: ") + std::strerror(errno));

    if (fds[0].revents & POLLIN) {
      unsigned char sigs[64];
      ssize_t n = read(g_signal_pipe[0], sigs, sizeof(sigs));
      for (ssize_t i = 0; i < n; ++i) {
        int sig = sigs[i];
        if (sig == SIGCHLD) continue;
        if (!tearing_down) {
          if (exit_code == 0) exit_code = 128 + sig;
          result.interrupted = true;
          failure = "received " + signal_name(sig);
          say("got " + signal_name(sig) + "; passing it to every process");
          teardown(sig);
        } else if (!killed) {
          say("got " + signal_name(sig) + " again; killing every process now");
          signal_all(SIGKILL);
          killed = true;
        }
      }
    }
    size_t next = 1;
    if (stdin_open) {
      if (fds[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buf[4096];
        ssize_t r = read(0, buf, sizeof(buf));
        if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
          stdin_open = false;
          if (!tearing_down) {
            if (exit_code == 0) exit_code = 128 + SIGHUP;
            result.interrupted = true;
            failure = "lost the connection to the launching node";
            say("stdin closed (the launching node went away); stopping every process");
            teardown(SIGTERM);
          }
        }
      }
      next = 2;
    }
    for (size_t i = 0; i < streams.size(); ++i)
      if (fds[next + i].revents) drain(*streams[i].first, *streams[i].second);
  }

  for (Child& c : children) {
    for (Stream* s : {&c.out, &c.err}) {
      if (s->fd >= 0) drain(*s, c.spec->prefix);
      if (s->fd >= 0) emit_lines(*s, c.spec->prefix, true), close(s->fd), s->fd = -1;
    }
    if (c.stdin_hold_fd >= 0) close(c.stdin_hold_fd);
  }
  guard.release();
  // Leftovers we SIGKILLed may still be dying: reap them briefly before going.
  for (double until = now_s() + 0.2; now_s() < until;) {
    pid_t r = waitpid(-1, nullptr, WNOHANG);
    if (r < 0 && errno == ECHILD) break;
    if (r <= 0) usleep(5000);
  }
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig : kHandledSignals)
    if (g_handled[sig]) sigaction(sig, &dfl, nullptr), g_handled[sig] = false;
  close(g_signal_pipe[0]), close(g_signal_pipe[1]);
  if (exit_code != 0)
    say("job failed: " + failure +
        (options.last_attempt ? "; exiting with " + std::to_string(exit_code) : std::string()));
  result.exit_code = exit_code;
  return result;
}

}  // namespace zero::launcher
