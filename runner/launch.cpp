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

int launch(int n, const std::string& config, std::vector<std::string> overrides, const LaunchOptions& opt) {
  bool has_devices = false;
  for (const auto& o : overrides) has_devices |= o.rfind("trainer.devices=", 0) == 0;
  if (!has_devices) overrides.push_back("trainer.devices=" + std::to_string(n));

  const char* env_port = std::getenv("MASTER_PORT");
  const std::string port = env_port && *env_port ? env_port : std::to_string(engine::free_local_port());
  const char* env_addr = std::getenv("MASTER_ADDR");
  const std::string addr = env_addr && *env_addr ? env_addr : "127.0.0.1";

  struct sigaction sa {};
  sa.sa_handler = on_launcher_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // Forwarded to the ranks, not the launcher's death: USR1/USR2 as they are
  // (stop and save; a preemption), HUP (the terminal went away) as TERM.
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGUSR2, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  ::signal(SIGPIPE, SIG_IGN);  // our own stdout's reader gone: the ranks' lines are lost, the ranks are not

  // The ranks' verdicts on who stopped responding come back on this pipe
  // (descriptor 3 in each rank, GANTRY_LAUNCH_REPORT_FD): the summary names
  // that rank, not the one that noticed, and a named rank is killed at once.
  int report[2] = {-1, -1};
  if (::pipe2(report, O_CLOEXEC) == 0) ::fcntl(report[0], F_SETFL, O_NONBLOCK);
  std::string report_partial;
  std::map<int, std::string> named;  // rank -> "rank 0: <its verdict>"

  const char* force_exec = std::getenv("GANTRY_LAUNCH_EXEC");
  const bool in_child =
      opt.train_in_child && !(force_exec && *force_exec && std::string(force_exec) != "0") && thread_count() == 1;
  std::fflush(nullptr);  // nothing buffered here is printed again by every child

  std::vector<Child> children(n);
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) {
      std::perror("gantry launch: pipe");
      return 1;
    }
    const pid_t launcher = ::getpid();
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // terminal Ctrl-C reaches the launcher only; it forwards once
      // A rank dies with its launcher (kill -9 of `gantry launch`): SIGTERM,
      // so it stops at the next step boundary and saves a checkpoint.
      ::prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (::getppid() != launcher) ::_exit(143);  // the launcher died before prctl
      ::dup2(fds[1], 1);
      ::dup2(fds[1], 2);
      if (report[1] >= 0) {
        if (report[1] == 3)
          ::fcntl(3, F_SETFD, 0);  // keep it across exec
        else
          ::dup2(report[1], 3);
        ::setenv("GANTRY_LAUNCH_REPORT_FD", "3", 1);
      }
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("GROUP_RANK", "0", 1);
      ::setenv("MASTER_ADDR", addr.c_str(), 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      if (in_child) {
        // What exec would have closed (every descriptor here is O_CLOEXEC) and
        // reset: the other ranks' pipes, the launcher's ends of this one's and
        // of the report pipe, the launcher's signal handlers (its SIGPIPE
        // ignore stays, as it would across exec).
        for (int k = 0; k < r; ++k) ::close(children[k].fd);
        ::close(fds[0]);
        if (fds[1] > 3) ::close(fds[1]);
        if (report[0] > 3) ::close(report[0]);
        if (report[1] > 3) ::close(report[1]);
        for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) ::signal(sig, SIG_DFL);
        // Its command line and /proc/PID/environ stay the launcher's (setenv
        // does not rewrite them): ps, top and pgrep tell the ranks apart by
        // this name (15 characters at most).
        char name[16];
        std::snprintf(name, sizeof name, r < 1000 ? "gantry rank %d" : "gantry r%d", r);
        ::prctl(PR_SET_NAME, name);
        std::exit(opt.train_in_child(config, overrides));  // as main's return: stdio flushed, destructors run
      }
      exec_train(opt.gantry_exe, config, overrides);
      std::fprintf(stderr, "gantry launch: cannot run %s: %s\n", opt.gantry_exe.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    ::fcntl(fds[0], F_SETFL, O_NONBLOCK);
    children[r].rank = r;
    children[r].pid = pid;
    children[r].fd = fds[0];
  }
  if (report[1] >= 0) ::close(report[1]);
  std::printf("gantry launch: %d ranks, master %s:%s%s\n", n, addr.c_str(), port.c_str(),
              in_child             ? ""
              : opt.train_in_child ? " (each rank execs gantry train)"
                                   : "");
  std::fflush(stdout);

  int first_failed = -1;
  std::vector<int> failed_now;  // ranks that failed, not yet blamed
  std::chrono::steady_clock::time_point blame_at{};
  int forwarded = 0;
  std::chrono::steady_clock::time_point kill_deadline{};
  auto signal_all = [&](int sig) {
    for (auto& c : children)
      if (c.running) ::kill(c.pid, sig);
  };
  auto running = [&] {
    for (auto& c : children)
      if (c.running || c.fd >= 0) return true;
    return false;
  };
  auto kill_stopped = [&] {
    for (auto& c : children)
      if (c.running && !c.killed && is_stopped(c.pid)) {
        std::printf("gantry launch: rank %d (pid %d) is stopped (SIGSTOP?) and stopped responding; killing it\n",
                    c.rank, int(c.pid));
        std::fflush(stdout);
        ::kill(c.pid, SIGKILL);
        c.killed = true;
      }
  };
  // "silent 1,5 by 0: <verdict>" lines from the ranks.
  auto read_reports = [&] {
    if (report[0] < 0) return;
    char buf[4096];
    ssize_t got;
    while ((got = ::read(report[0], buf, sizeof buf)) > 0) report_partial.append(buf, static_cast<size_t>(got));
    size_t nl;
    while ((nl = report_partial.find('\n')) != std::string::npos) {
      const std::string line = report_partial.substr(0, nl);
      report_partial.erase(0, nl + 1);
      const size_t by = line.find(" by "), colon = line.find(": ", by == std::string::npos ? 0 : by);
      if (line.rfind("silent ", 0) != 0 || by == std::string::npos || colon == std::string::npos) continue;
      const std::string list = line.substr(7, by - 7), who = line.substr(by + 4, colon - by - 4);
      size_t at = 0;
      while (at <= list.size()) {
        const size_t comma = std::min(list.find(',', at), list.size());
        const int r = std::atoi(list.substr(at, comma - at).c_str());
        if (r >= 0 && r < n && !named.count(r)) named[r] = "rank " + who + ": " + line.substr(colon + 2);
        at = comma + 1;
      }
    }
  };
  auto blame = [&] {
    read_reports();
    first_failed = failed_now.front();
    for (int r : failed_now)
      if (children[r].code > 128 && children[first_failed].code <= 128) first_failed = r;
    const Child& c = children[first_failed];
    // A rank that is stopped, or that the others named as silent, is the
    // cause; the one that failed only noticed.
    std::string cause, why;
    for (auto& o : children) {
      const bool stopped = o.running && is_stopped(o.pid);
      const auto it = named.find(o.rank);
      if (!stopped && it == named.end()) continue;
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
    for (auto& o : children)  // hung in its own code: it cannot honour SIGTERM either
      if (o.running && !o.killed && named.count(o.rank)) {
        std::printf("gantry launch: rank %d (pid %d) does not respond (%s); killing it\n", o.rank, int(o.pid),
                    named[o.rank].c_str());
        std::fflush(stdout);
        ::kill(o.pid, SIGKILL);
        o.killed = true;
      }
    signal_all(SIGTERM);
    kill_deadline = std::chrono::steady_clock::now() + opt.grace;
  };
  while (running()) {
    std::vector<pollfd> pfds;
    for (auto& c : children)
      if (c.fd >= 0) pfds.push_back({c.fd, POLLIN, 0});
    ::poll(pfds.data(), pfds.size(), 100);
    read_reports();
    for (auto& c : children) {
      if (c.fd < 0) continue;
      drain(c);
      char probe;
      const ssize_t n_read = ::read(c.fd, &probe, 0);
      (void)n_read;
    }
    // Forward signals: the first SIGINT/SIGTERM as is, a second SIGINT as SIGKILL.
    const int count = g_signal_count.load();
    if (count > forwarded) {
      signal_all(count > 1 ? SIGKILL : g_signal.load());
      forwarded = count;
    }
    int status = 0;
    pid_t pid;
    while ((pid = ::waitpid(-1, &status, WNOHANG)) > 0) {
      for (auto& c : children) {
        if (c.pid != pid) continue;
        c.running = false;
        c.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        drain(c);
        if (!c.partial.empty()) emit(c, c.partial);
        ::close(c.fd);
        c.fd = -1;
        if (c.code != 0 && forwarded == 0 && first_failed < 0) failed_now.push_back(c.rank);
      }
    }
    // A rank whose peer died fails a moment later: collect the failures of a
    // short window, then blame a rank killed by a signal before one that
    // exited with an error (most likely the consequence).
    if (!failed_now.empty() && first_failed < 0) {
      if (blame_at == std::chrono::steady_clock::time_point{})
        blame_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
      if (std::chrono::steady_clock::now() >= blame_at) blame();
    }
    if (first_failed >= 0) kill_stopped();  // stopped after the blame, or by the user meanwhile
    if (first_failed >= 0 && std::chrono::steady_clock::now() > kill_deadline) signal_all(SIGKILL);
  }
  if (first_failed < 0 && !failed_now.empty()) blame();  // all ended within the window
  if (report[0] >= 0) ::close(report[0]);
  if (first_failed >= 0) return children[first_failed].code;
  for (const auto& c : children)
    if (c.code != 0) return c.code;
  return 0;
}

}  // namespace gantry
