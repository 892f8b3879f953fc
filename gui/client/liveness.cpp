#include "liveness.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace gantry::client {

namespace {

std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

// Unix seconds at which process `pid` started, or -1 (gone, unreadable).
double process_start(long pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(stat, text)) return -1;
  const size_t close = text.rfind(')');  // comm may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  for (int i = 3; i < 22 && rest >> field; ++i) {  // field 22: starttime, in clock ticks after boot
  }
  unsigned long long ticks = 0;
  if (!(rest >> ticks)) return -1;
  std::ifstream boot("/proc/stat");
  std::string key;
  double btime = -1;
  while (boot >> key) {
    if (key == "btime") {
      boot >> btime;
      break;
    }
  }
  if (btime < 0) return -1;
  return btime + static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

bool is_gantry(long pid) {
  std::ifstream comm("/proc/" + std::to_string(pid) + "/comm");
  std::string name;
  return std::getline(comm, name) && name.rfind("gantry", 0) == 0;
}

}  // namespace

std::string Writer::text() const { return "gantry pid " + std::to_string(pid) + " on " + host; }

Writer writer_of(const std::string& run_dir) {
  Writer w;
  const std::string path = run_dir + "/.lock";
  std::ifstream in(path);
  std::string gantry, pid_word, on;
  if (!(in >> gantry >> pid_word >> w.pid >> on >> w.host) || gantry != "gantry" || pid_word != "pid" || on != "on")
    return w;
  w.known = w.pid > 0;
  w.here = w.host == hostname();
  struct stat st {};
  if (!w.known || !w.here || ::stat(path.c_str(), &st) != 0) return w;
  const double started = process_start(w.pid);
  // The note is written right after the process took the lock: a process
  // that started after it is another one that got the pid.
  w.alive = started >= 0 && started <= static_cast<double>(st.st_mtime) + 1 && is_gantry(w.pid);
  return w;
}

std::string lost_why(const RunState& state, const SourceStatus& source, const std::string& run_dir, double now) {
  if (state.status() != RunStatus::kRunning && state.status() != RunStatus::kLost) return "";
  if (!run_dir.empty()) {
    const Writer w = writer_of(run_dir);
    if (w.here && !w.alive) return "no end record, the writer's process (" + w.text() + ") is gone";
    if (w.here) return "";  // alive: a quiet run is not a lost one
  }
  if (source.state == SourceStatus::State::kReconnecting && now - source.since >= kLostAfterClosed)
    return "no end record, the stream closed and its server has not answered for " + duration_text(now - source.since);
  const double silent = now - state.latest_wall_time();
  if (state.latest_wall_time() > 0 && silent >= std::max(kLostAfterSilent, 10 * state.stale_after()))
    return "no end record, no record for " + duration_text(silent);
  return "";
}

void check_lost(RunState& state, const Source& source, double now) {
  double& at = state.lost_checked_at();
  if (now - at < 1 && now >= at) return;
  at = now;
  const std::string why = lost_why(state, source.status(), source.run_dir(), now);
  if (why.empty())
    state.clear_lost();
  else
    state.mark_lost(why);
}

}  // namespace gantry::client
