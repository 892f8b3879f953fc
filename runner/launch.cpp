// `gantry launch -n N CONFIG [key=value ...]`: local multi-process training,
// like torchrun. Starts N `gantry train` processes with RANK, WORLD_SIZE,
// LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set, prefixes each
// line they print with its rank, forwards SIGINT/SIGTERM once, and when a rank
// fails stops the others and exits with that rank's code. A CPU job's ranks are
// forked from the launcher without exec (LaunchOptions::train_in_child): they
// share its copy of LibTorch's relocated pages instead of one each.
#include "launch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <dirent.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <map>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "gantry/engine.hpp"

namespace gantry {

namespace {

std::atomic<int> g_signal{0};
std::atomic<int> g_signal_count{0};

extern "C" void on_launcher_signal(int sig) {
  g_signal.store(sig == SIGHUP ? SIGTERM : sig);
  g_signal_count.fetch_add(1);
}

struct Child {
  int rank = 0;
  pid_t pid = -1;
  int fd = -1;          // read end of its stdout+stderr
  std::string partial;  // an unfinished line
  bool running = true;
  int code = 0;         // exit code, or 128 + signal
  bool killed = false;  // SIGKILLed by the launcher (stopped, or named as hung)
};

void emit(const Child& c, const std::string& line) {
  std::printf("[rank %d] %s\n", c.rank, line.c_str());
  std::fflush(stdout);
}

void drain(Child& c) {
  char buf[4096];
  while (true) {
    const ssize_t n = ::read(c.fd, buf, sizeof buf);
    if (n <= 0) break;
    c.partial.append(buf, static_cast<size_t>(n));
    size_t nl;
    while ((nl = c.partial.find_first_of("\n\r")) != std::string::npos) {
      const std::string line = c.partial.substr(0, nl);
      c.partial.erase(0, nl + 1);
      if (!line.empty()) emit(c, line);
    }
  }
}

// A rank stopped by SIGSTOP (or a debugger) cannot honour SIGTERM: the
// launcher kills it at once instead of waiting out the grace period.
bool is_stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'T' || state == 't';
}

std::string describe_status(int code) {
  if (code > 128) return "was killed by signal " + std::to_string(code - 128) + " (" + strsignal(code - 128) + ")";
  return "exited with code " + std::to_string(code);
}

// The threads of this process: a child forked without exec keeps only the
// one that forked, so any other (and a lock it held) would be lost in it.
int thread_count() {
  DIR* d = ::opendir("/proc/self/task");
  if (!d) return -1;
  int n = 0;
  while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
  ::closedir(d);
  return n;
}

}  // namespace

void exec_train(const std::string& gantry_exe, const std::string& config, const std::vector<std::string>& args) {
  std::vector<std::string> all{gantry_exe, "train", config};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv(gantry_exe.c_str(), argv.data());
}

namespace {

// The launcher's signals: INT and TERM forwarded once (a second INT kills),
// USR1/USR2 as they are (stop and save; a preemption), HUP (the terminal
// went away) as TERM; SIGPIPE ignored (our stdout's reader gone: the ranks'
// lines are lost, the ranks are not).
void install_launcher_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) sigaction(sig, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
}

// How the ranks are started: where they meet, the report pipe their
// verdicts come back on, and whether a rank trains in the forked child.
struct RankStart {
  int n = 0;
  std::string addr, port;
  int report_write = -1;  // the report pipe's write end (descriptor 3 in each rank)
  bool in_child = false;
  const std::string* config = nullptr;
  const std::vector<std::string>* overrides = nullptr;
  const LaunchOptions* opt = nullptr;
};

// In the forked child of rank r: its environment (torchrun's variables),
// stdout and stderr into `out`, then `gantry train` (exec, or in this
// process). Never returns.
[[noreturn]] void become_rank(const RankStart& how, int r, int out, int out_read, int report_read, pid_t launcher,
                              const std::vector<Child>& started) {
  ::setpgid(0, 0);  // terminal Ctrl-C reaches the launcher only; it forwards once
  // A rank dies with its launcher (kill -9 of `gantry launch`): SIGTERM,
  // so it stops at the next step boundary and saves a checkpoint.
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() != launcher) ::_exit(143);  // the launcher died before prctl
  ::dup2(out, 1);
  ::dup2(out, 2);
  if (how.report_write >= 0) {
    if (how.report_write == 3)
      ::fcntl(3, F_SETFD, 0);  // keep it across exec
    else
      ::dup2(how.report_write, 3);
    ::setenv("GANTRY_LAUNCH_REPORT_FD", "3", 1);
  }
  ::setenv("RANK", std::to_string(r).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(how.n).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(how.n).c_str(), 1);
  ::setenv("GROUP_RANK", "0", 1);
  ::setenv("MASTER_ADDR", how.addr.c_str(), 1);
  ::setenv("MASTER_PORT", how.port.c_str(), 1);
  if (how.in_child) {
    // What exec would have closed (every descriptor here is O_CLOEXEC) and
    // reset: the other ranks' pipes, the launcher's ends of this one's and
    // of the report pipe, the launcher's signal handlers (its SIGPIPE
    // ignore stays, as it would across exec).
    for (const Child& c : started) ::close(c.fd);
    ::close(out_read);
    if (out > 3) ::close(out);
    if (report_read > 3) ::close(report_read);
    if (how.report_write > 3) ::close(how.report_write);
    for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) ::signal(sig, SIG_DFL);
    // Its command line and /proc/PID/environ stay the launcher's (setenv
    // does not rewrite them): ps, top and pgrep tell the ranks apart by
    // this name (15 characters at most).
    char name[16];
    std::snprintf(name, sizeof name, r < 1000 ? "gantry rank %d" : "gantry r%d", r);
    ::prctl(PR_SET_NAME, name);
    std::exit(
        how.opt->train_in_child(*how.config, *how.overrides));  // as main's return: stdio flushed, destructors run
  }
  exec_train(how.opt->gantry_exe, *how.config, *how.overrides);
  std::fprintf(stderr, "gantry launch: cannot run %s: %s\n", how.opt->gantry_exe.c_str(), std::strerror(errno));
  ::_exit(127);
}

// Watches the ranks until every one has ended: their lines prefixed with
// their rank, signals forwarded, and when one fails the blame (the rank the
// others named as silent, or a stopped one, before the one that noticed),
// then TERM to the rest and KILL after the grace.
class Supervisor {
 public:
  Supervisor(std::vector<Child>& children, int report_read, std::chrono::milliseconds grace)
      : children_(children), report_(report_read), grace_(grace) {}

  // The job's exit code: the blamed rank's, else the first nonzero, else 0.
  int run() {
    while (running()) {
      watch_once();
      // A rank whose peer died fails a moment later: collect the failures of a
      // short window, then blame a rank killed by a signal before one that
      // exited with an error (most likely the consequence).
      if (!failed_now_.empty() && first_failed_ < 0) {
        if (blame_at_ == std::chrono::steady_clock::time_point{})
          blame_at_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
        if (std::chrono::steady_clock::now() >= blame_at_) blame();
      }
      if (first_failed_ >= 0) kill_stopped();  // stopped after the blame, or by the user meanwhile
      if (first_failed_ >= 0 && std::chrono::steady_clock::now() > kill_deadline_) signal_all(SIGKILL);
    }
    if (first_failed_ < 0 && !failed_now_.empty()) blame();  // all ended within the window
    if (report_ >= 0) ::close(report_);
    if (first_failed_ >= 0) return children_[first_failed_].code;
    for (const auto& c : children_)
      if (c.code != 0) return c.code;
    return 0;
  }

 private:
  // One round: the ranks' output, the verdicts, a signal to forward, the ranks that ended.
  void watch_once() {
    std::vector<pollfd> pfds;
    for (auto& c : children_)
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 100);
    read_reports();
    for (auto& c : children_) {
      if (c.fd < 0) continue;
      drain(c);
      char probe;
      const ssize_t n_read = ::read(c.fd, &probe, 0);
      (void)n_read;
    }
    // Forward signals: the first SIGINT/SIGTERM as is, a second SIGINT as SIGKILL.
    const int count = g_signal_count.load();
    if (count > forwarded_) {
      signal_all(count > 1 ? SIGKILL : g_signal.load());
      forwarded_ = count;
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& c : children_) {
        if (c.pid != pid) continue;
        c.running = false;
        c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        drain(c);
        if (!c.partial.empty()) emit(c, c.partial);
        ::close(c.fd);
        c.fd = -1;
        if (c.code != 0 && forwarded_ == 0 && first_failed_ < 0) failed_now_.push_back(c.rank);
      }
    }
  }

  void signal_all(int sig) {
    for (auto& c : children_)
      if (c.running) ::kill(c.pid, sig);
  }
  bool running() const {
    for (auto& c : children_)
      if (c.running || c.fd >= 0) return true;
    return false;
  }
  void kill_stopped() {
    for (auto& c : children_)
      if (c.running && !c.killed && is_stopped(c.pid)) {
        std::printf("gantry launch: rank %d (pid %d) is stopped (SIGSTOP?) and stopped responding; killing it\n",
                    c.rank, int(c.pid));
        std::fflush(stdout);
        ::kill(c.pid, SIGKILL);
        c.killed = true;
      }
  }
  // "silent 1,5 by 0: <verdict>" lines from the ranks.
  void read_reports() {
    if (report_ < 0) return;
    char buf[4096];
    ssize_t got;
    while ((got = ::read(report_, buf, sizeof buf)) > 0) report_partial_.append(buf, static_cast<size_t>(got));
    size_t nl;
    const int n = int(children_.size());
    while ((nl = report_partial_.find('\n')) != std::string::npos) {
      const std::string line = report_partial_.substr(0, nl);
      report_partial_.erase(0, nl + 1);
      const size_t by = line.find(" by "), colon = line.find(": ", by == std::string::npos ? 0 : by);
      if (line.rfind("silent ", 0) != 0 || by == std::string::npos || colon == std::string::npos) continue;
      const std::string list = line.substr(7, by - 7), who = line.substr(by + 4, colon - by - 4);
      size_t at = 0;
      while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const int r = std::atoi(list.substr(at, comma - at).c_str());
        if (r >= 0 && r < n && !named_.count(r)) named_[r] = "rank " + who + ": " + line.substr(colon + 2);
        at = comma + 1;
      }
    }
  }
  void blame() {
    read_reports();
    first_failed_ = failed_now_.front();
    for (int r : failed_now_)
      if (children_[r].code > 128 && children_[first_failed_].code <= 128) first_failed_ = r;
    const Child& c = children_[first_failed_];
    // A rank that is stopped, or that the others named as silent, is the
    // cause; the one that failed only noticed.
    std::string cause, why;
    for (auto& o : children_) {
      const bool stopped = o.running && is_stopped(o.pid);
      const auto it = named_.find(o.rank);
      if (!stopped && it == named_.end()) continue;
      cause += (cause.empty() ? "" : ", ") + std::to_string(o.rank);
      if (why.empty()) why = stopped ? "process stopped" : "named by " + it->second.substr(0, it->second.find(':'));
    }
    if (!cause.empty())
      std::printf("gantry launch: rank %d %s after rank%s %s stopped responding (%s); ending the job\n", c.rank,
                  describe_status(c.code).c_str(), cause.find(',') == std::string::npos ? "" : "s", cause.c_str(),
                  why.c_str());
    else
      std::printf("gantry launch: rank %d %s; stopping the other ranks\n", c.rank, describe_status(c.code).c_str());
    std::fflush(stdout);
    kill_stopped();
    for (auto& o : children_)  // hung in its own code: it cannot honour SIGTERM either
      if (o.running && !o.killed && named_.count(o.rank)) {
        std::printf("gantry launch: rank %d (pid %d) does not respond (%s); killing it\n", o.rank, int(o.pid),
                    named_[o.rank].c_str());
        std::fflush(stdout);
        ::kill(o.pid, SIGKILL);
        o.killed = true;
      }
    signal_all(SIGTERM);
    kill_deadline_ = std::chrono::steady_clock::now() + grace_;
  }

  std::vector<Child>& children_;
  int report_;                       // the report pipe's read end (-1: none)
  std::chrono::milliseconds grace_;  // SIGTERM -> SIGKILL after a rank failed
  std::string report_partial_;
  std::map<int, std::string> named_;  // rank -> "rank 0: <its verdict>"
  int first_failed_ = -1;
  std::vector<int> failed_now_;  // ranks that failed, not yet blamed
  std::chrono::steady_clock::time_point blame_at_{}, kill_deadline_{};
  int forwarded_ = 0;
};

}  // namespace

int launch(int n, const std::string& config, std::vector<std::string> overrides, const LaunchOptions& opt) {
  bool has_devices = false;
  for (const auto& o : overrides) has_devices |= o.rfind("trainer.devices=", 0) == 0;
  if (!has_devices) overrides.push_back("trainer.devices=" + std::to_string(n));

  RankStart how;
  how.n = n;
  const char* env_port = std::getenv("MASTER_PORT");
  how.port = env_port && *env_port ? env_port : std::to_string(engine::free_local_port());
  const char* env_addr = std::getenv("MASTER_ADDR");
  how.addr = env_addr && *env_addr ? env_addr : "127.0.0.1";
  how.config = &config;
  how.overrides = &overrides;
  how.opt = &opt;
  install_launcher_signals();

  // The ranks' verdicts on who stopped responding come back on this pipe
  // (descriptor 3 in each rank, GANTRY_LAUNCH_REPORT_FD): the summary names
  // that rank, not the one that noticed, and a named rank is killed at once.
  int report[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) == 0) ::fcntl(report[0], F_SETFL, O_NONBLOCK);
  how.report_write = report[1];

  const char* force_exec = std::getenv("GANTRY_LAUNCH_EXEC");
  how.in_child =
      opt.train_in_child && !(force_exec && *force_exec && std::string(force_exec) != "0") && thread_count() == 1;
  std::fflush(nullptr);  // nothing buffered here is printed again by every child

  std::vector<Child> children;
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("gantry launch: pipe");
      return 1;
    }
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) become_rank(how, r, fds[1], fds[0], report[0], launcher, children);
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    Child c;
    c.rank = r;
    c.pid = pid;
    c.fd = fds[0];
    children.push_back(std::move(c));
  }
  if (report[1] >= 0) ::close(report[1]);
  std::printf("gantry launch: %d ranks, master %s:%s%s\n", n, how.addr.c_str(), how.port.c_str(),
              how.in_child         ? ""
              : opt.train_in_child ? " (each rank execs gantry train)"
                                   : "");
  std::fflush(stdout);
  return Supervisor(children, report[0], opt.grace).run();
}

}  // namespace gantry
