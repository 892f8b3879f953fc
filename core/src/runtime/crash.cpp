#include "runtime/crash.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstring>

#include "wire/record_log.hpp"

namespace gantry {

namespace {

// The hook that runs now, per thread: the training thread's and the data
// loader's (a plugin's dataset) are told apart. Static TLS (initial-exec): the
// signal handler reads it without the allocation a dynamic TLS block may need.
__thread const char* g_plugin __attribute__((tls_model("initial-exec"))) = nullptr;
__thread const char* g_hook __attribute__((tls_model("initial-exec"))) = nullptr;
std::atomic<int64_t> g_step{-1};  // the training's step, for every thread's line
std::atomic<int> g_log_fd{-1};
std::atomic<const uint64_t*> g_last_seq{nullptr};
std::atomic<bool> g_in_handler{false};

// Appending without allocating (async-signal-safe).
struct Line {
  char* out;
  size_t cap, n = 0;
  void add(const char* s) {
    while (s && *s && n + 1 < cap) out[n++] = *s++;
    out[n] = '\0';
  }
  void add(int64_t v) {
    char digits[24];
    int k = 0;
    const bool negative = v < 0;
    uint64_t u = negative ? uint64_t(-(v + 1)) + 1 : uint64_t(v);
    do digits[k++] = char('0' + u % 10);
    while ((u /= 10) != 0);
    if (negative) digits[k++] = '-';
    while (k > 0 && n + 1 < cap) out[n++] = digits[--k];
    out[n] = '\0';
  }
};

const char* name_of(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGABRT:
      return "SIGABRT";
    default:
      return "a signal";
  }
}

extern "C" void on_crash(int sig) {
  if (!g_in_handler.exchange(true)) {  // a second crash (in here, or another thread): straight to the default
    char line[600];
    const size_t n = crash_line(sig, line, sizeof line - 1);
    line[n] = '\n';
    ssize_t ignored = ::write(2, line, n + 1);
    const int fd = g_log_fd.load();
    const uint64_t* seq = g_last_seq.load();
    if (fd >= 0 && seq) {
      // The text without the "gantry: error: " prefix, as the `failed` event of a thrown error has it.
      const char* text = line + std::strlen("gantry: error: ");
      line[n] = '\0';
      timespec ts{};
      ::clock_gettime(CLOCK_REALTIME, &ts);
      char record[1024];
      const size_t len = wire::encode_event_record(record, sizeof record, *seq + 1, "failed", g_step.load(),
                                                   double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9, text);
      if (len > 0) ignored = ::write(fd, record, len);
    }
    (void)ignored;
  }
  // SA_RESETHAND put the default action back: raised again, it ends the
  // process with this signal (for SIGSEGV the faulting instruction repeats).
  ::raise(sig);
}

}  // namespace

std::size_t crash_line(int sig, char* out, std::size_t cap) {
  Line l{out, cap};
  const char* plugin = g_plugin;
  const char* hook = g_hook;
  const int64_t step = g_step.load();
  l.add("gantry: error: ");
  if (hook && plugin) {
    l.add("plugin ");
    l.add(plugin);
    l.add(" crashed with ");
  } else {
    l.add("crashed with ");
  }
  l.add(name_of(sig));
  if (sig == SIGABRT) l.add(" (std::abort, or an exception nothing caught)");
  if (hook && plugin) {
    l.add(" in ");
    l.add(hook);
  }
  if (step >= 0) {
    l.add(" at step ");
    l.add(step);
  }
  if (!hook) l.add(" (not in a plugin hook)");
  return l.n;
}

void install_crash_handlers() {
  static bool done = false;
  if (done) return;
  done = true;
  // An alternate stack: a stack overflow cannot run its handler on the stack it overflowed.
  static char alt[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt;
  ss.ss_size = sizeof alt;
  ::sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_crash;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK | SA_NODEFER;
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT}) ::sigaction(sig, &sa, nullptr);
}

void crash_log_to(int fd, const uint64_t* last_seq) {
  g_last_seq.store(last_seq);
  g_log_fd.store(fd);
}

CrashScope::CrashScope(const char* plugin, const char* hook, int64_t step) : previous_hook_(g_hook) {
  g_plugin = plugin;
  if (step >= 0) g_step.store(step);
  g_hook = hook;
}

CrashScope::~CrashScope() { g_hook = previous_hook_; }

}  // namespace gantry
