// `gantry sweep`: a grid search over config overrides, as Hydra's multirun or
// a W&B grid sweep, run locally.
//
//   gantry sweep configs/gan_fashion_mnist.yaml system.lr=1e-4,2e-4 data.batch_size=32,64 --parallel 2
//
// Each override whose value has commas is an axis; the others apply to every
// point. Every point is checked (config, keys, values) before anything runs.
// A point is its own experiment under the sweep's directory, named by its
// overrides: <out_dir>/<name>/sweep/<lr=0.0001,batch_size=32>/<timestamp>/,
// its output in <...>/sweep/<point>.log. Points run N at a time with the
// cores divided among them (trainer.threads, unless the command line sets it).
// sweep.tsv records each point's status as it ends; running the same command
// again skips the points that are done and resumes the others from their
// newest checkpoint (trainer.resume=auto). Ctrl-C stops every running point
// at its next step boundary (each saves a checkpoint) and ends the sweep.
#include "sweep.hpp"

#include "launch.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "gantry/engine.hpp"

namespace fs = std::filesystem;

namespace gantry {

namespace {

std::atomic<int> g_sweep_signal{0};
extern "C" void on_sweep_signal(int sig) { g_sweep_signal.store(sig); }

struct Axis {
  std::string key;
  std::vector<std::string> values;
};

struct Point {
  std::string label;                   // lr=0.0001,batch_size=32
  std::vector<std::string> overrides;  // system.lr=0.0001 data.batch_size=32
  std::string status = "pending";      // pending | done | failed (exit N) | stopped
  pid_t pid = -1;
};

// The point's name: each axis's last key part and value ("system.lr" ->
// "lr"), the full key where two axes end alike; '/' in a value becomes '_'.
std::string label_of(const std::vector<Axis>& axes, const std::vector<std::string>& values) {
  std::string out;
  for (size_t i = 0; i < axes.size(); ++i) {
    std::string key = axes[i].key.substr(axes[i].key.rfind('.') + 1);
    for (size_t j = 0; j < axes.size(); ++j)
      if (j != i && axes[j].key.substr(axes[j].key.rfind('.') + 1) == key) key = axes[i].key;
    std::string v = values[i];
    std::replace(v.begin(), v.end(), '/', '_');
    out += (out.empty() ? "" : ",") + key + "=" + v;
  }
  return out.empty() ? "default" : out;
}

std::map<std::string, std::string> read_status(const fs::path& csv) {
  std::map<std::string, std::string> out;
  std::ifstream in(csv);
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    const size_t tab = line.rfind('\t');
    if (tab != std::string::npos) out[line.substr(0, tab)] = line.substr(tab + 1);
  }
  return out;
}

void write_status(const fs::path& csv, const std::vector<Point>& points) {
  std::string text = "point\tstatus\n";
  for (const auto& p : points) text += p.label + "\t" + p.status + "\n";
  engine::write_file_atomic(csv.string(), text);
}

// An axis's values, "a,b,c" (an empty one stays, to be refused).
std::vector<std::string> axis_values(const std::string& v) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t comma; (comma = v.find(',', start)) != std::string::npos; start = comma + 1)
    out.push_back(v.substr(start, comma - start));
  out.push_back(v.substr(start));
  return out;
}

pid_t start_point(const SweepOptions& opt, const std::string& config, const std::vector<std::string>& args,
                  const fs::path& log) {
  const pid_t sweeper = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed sweep takes its points with it
  if (::getppid() != sweeper) ::_exit(143);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  ::setpgid(0, 0);  // the terminal's Ctrl-C reaches the sweep, which forwards it once
  exec_train(opt.gantry_exe, config, args);
  std::fprintf(stderr, "gantry sweep: cannot run %s: %s\n", opt.gantry_exe.c_str(), std::strerror(errno));
  ::_exit(127);
}

void print_summary(const std::vector<Point>& points, const fs::path& dir, const SweepOptions& opt) {
  // Columns: every metric any point logged, in first-seen order.
  std::vector<std::string> metrics;
  std::map<std::string, std::map<std::string, std::string>> values;  // point -> metric -> value
  for (const auto& p : points) {
    const auto [header, row] = engine::last_metrics((dir / p.label / "latest" / "metrics.csv").string());
    for (size_t i = 0; i < header.size() && i < row.size(); ++i) {
      if (header[i] == "epoch" || header[i] == "wall_time" || header[i] == "kind") continue;
      if (std::find(metrics.begin(), metrics.end(), header[i]) == metrics.end()) metrics.push_back(header[i]);
      values[p.label][header[i]] = row[i];
    }
  }
  std::string metric = opt.metric;
  if (metric.empty())
    for (const auto& m : metrics)
      if (m != "step" && m.rfind("lr-", 0) != 0) {
        metric = m;
        break;
      }
  size_t w = 5;
  for (const auto& p : points) w = std::max(w, p.label.size());
  std::printf("\n%-*s  %-16s", int(w), "point", "status");
  for (const auto& m : metrics) std::printf("  %12s", m.c_str());
  std::printf("\n");
  const Point* best = nullptr;
  double best_value = 0;
  for (const auto& p : points) {
    std::printf("%-*s  %-16s", int(w), p.label.c_str(), p.status.c_str());
    for (const auto& m : metrics) {
      const auto it = values[p.label].find(m);
      std::printf("  %12s", it == values[p.label].end() ? "-" : it->second.c_str());
    }
    std::printf("\n");
    const auto it = values[p.label].find(metric);
    if ((p.status != "done" && p.status != "ran") || it == values[p.label].end()) continue;
    const double v = std::strtod(it->second.c_str(), nullptr);
    if (!std::isfinite(v)) continue;
    if (!best || (opt.maximize ? v > best_value : v < best_value)) {
      best = &p;
      best_value = v;
    }
  }
  if (best)
    std::printf("best by final %s (%s): %s (%s)\n", metric.c_str(), opt.maximize ? "largest" : "smallest",
                best->label.c_str(), values[best->label][metric].c_str());
  else if (!metric.empty())
    std::printf("best: none (no point that ran logged %s)\n", metric.c_str());
  std::printf("sweep directory: %s (sweep.tsv; each point's runs under it)\n", dir.c_str());
}

// The grid `args` makes, every point's config checked; the sweep's directory.
struct Grid {
  std::vector<std::string> fixed;
  std::vector<Axis> axes;
  std::vector<Point> points;
  bool threads_given = false;
  fs::path dir;
};

Grid make_grid(const std::string& config, const std::vector<std::string>& args) {
  Grid g;
  for (const auto& a : args) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("gantry sweep: '" + a + "' is not key=value (an axis is key=a,b,c)");
    const std::string key = a.substr(0, eq), value = a.substr(eq + 1);
    if (key == "name" || key == "trainer.out_dir" || key == "trainer.resume")
      throw ConfigError("gantry sweep: '" + key + "' is set by the sweep for each point (its directory and resume)");
    g.threads_given |= key == "trainer.threads";
    if (value.find(',') == std::string::npos) {
      g.fixed.push_back(a);
      continue;
    }
    Axis axis{key, axis_values(value)};
    for (const auto& v : axis.values)
      if (v.empty()) throw ConfigError("gantry sweep: '" + a + "' has an empty value");
    for (const auto& other : g.axes)
      if (other.key == key) throw ConfigError("gantry sweep: '" + key + "' is swept twice");
    g.axes.push_back(std::move(axis));
  }
  // The grid, first axis slowest (as nested loops read left to right).
  std::vector<size_t> at(g.axes.size(), 0);
  while (true) {
    Point p;
    std::vector<std::string> values;
    for (size_t i = 0; i < g.axes.size(); ++i) {
      values.push_back(g.axes[i].values[at[i]]);
      p.overrides.push_back(g.axes[i].key + "=" + values.back());
    }
    p.label = label_of(g.axes, values);
    g.points.push_back(std::move(p));
    size_t i = g.axes.size();
    while (i > 0 && ++at[i - 1] == g.axes[i - 1].values.size()) at[--i] = 0;
    if (i == 0) break;
  }
  // Every point's config, checked before anything runs.
  const engine::JobSettings base = engine::load_job(config, g.fixed);
  for (const auto& p : g.points) {
    std::vector<std::string> o = g.fixed;
    o.insert(o.end(), p.overrides.begin(), p.overrides.end());
    try {
      engine::load_job(config, o);
    } catch (const Error& e) {
      throw ConfigError("gantry sweep: point " + p.label + ": " + e.what());
    }
  }
  g.dir = fs::path(base.out_dir) / base.name / "sweep";
  return g;
}

// What `gantry train` gets for point `p` (besides the config).
std::vector<std::string> train_args(const Grid& g, const Point& p) {
  std::vector<std::string> a = g.fixed;  // never name, out_dir or resume (make_grid refuses them)
  a.insert(a.end(), p.overrides.begin(), p.overrides.end());
  a.push_back("name=" + p.label);
  a.push_back("trainer.out_dir=" + g.dir.string());
  a.push_back("trainer.resume=auto");
  return a;
}

// One point of a SLURM job array: SLURM_ARRAY_TASK_ID's, as `gantry train`
// itself (exec: srun's signals, ranks and requeue reach it unchanged).
int run_array_task(const std::string& config, const Grid& g, const SweepOptions& opt) {
  const char* id = std::getenv("SLURM_ARRAY_TASK_ID");
  char* end = nullptr;
  const long k = id ? std::strtol(id, &end, 10) : -1;
  if (!id || *end || k < 0 || k >= long(g.points.size()))
    throw ConfigError(std::string("gantry sweep --array-task: SLURM_ARRAY_TASK_ID is ") + (id ? id : "not set") +
                      ", the grid has points 0-" + std::to_string(g.points.size() - 1) +
                      " (submit it with gantry submit --sweep)");
  const Point& p = g.points[size_t(k)];
  std::error_code ec;
  fs::create_directories(g.dir, ec);
  std::printf("sweep: array task %ld of %zu: %s\n", k, g.points.size(), p.label.c_str());
  std::fflush(stdout);
  exec_train(opt.gantry_exe, config, train_args(g, p));
  throw Error("gantry sweep: cannot run " + opt.gantry_exe + ": " + std::strerror(errno));
}

}  // namespace

std::string last_line_of(const fs::path& log) {
  std::ifstream in(log);
  std::string line, last;
  while (std::getline(in, line))
    if (!line.empty()) last = line;
  return last;
}

size_t sweep_size(const std::string& config, const std::vector<std::string>& args) {
  return make_grid(config, args).points.size();
}

int sweep(const std::string& config, const std::vector<std::string>& args, const SweepOptions& opt) {
  if (opt.parallel < 1) throw ConfigError("gantry sweep: --parallel must be >= 1");
  Grid g = make_grid(config, args);
  if (opt.array_task) return run_array_task(config, g, opt);
  std::vector<Point>& points = g.points;
  const std::vector<Axis>& axes = g.axes;
  const bool threads_given = g.threads_given;
  const fs::path& dir = g.dir;
  std::error_code ec;
  if (opt.summary_only) {
    const auto known = read_status(dir / "sweep.tsv");
    for (auto& p : points) {
      const auto it = known.find(p.label);
      p.status = it != known.end()                                      ? it->second
                 : fs::exists(dir / p.label / "latest" / "metrics.csv") ? "ran"
                                                                        : "not run";
    }
    print_summary(points, dir, opt);
    return 0;
  }
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create " + dir.string() + ": " + ec.message());
  const fs::path csv = dir / "sweep.tsv";  // point<TAB>status (labels hold commas)
  const auto known = read_status(csv);
  size_t done = 0;
  for (auto& p : points) {
    const auto it = known.find(p.label);
    if (it != known.end() && it->second == "done") {
      p.status = "done";
      ++done;
    }
  }
  const int threads = std::max(1, engine::available_cores() / std::min<int>(opt.parallel, int(points.size())));
  const std::string each =
      threads_given ? "" : ", " + std::to_string(threads) + (threads == 1 ? " thread" : " threads") + " each";
  std::printf("sweep: %zu points (%zu %s) of %s, %zu done already; %d at a time%s\n", points.size(), axes.size(),
              axes.size() == 1 ? "axis" : "axes", config.c_str(), done, opt.parallel, each.c_str());
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = on_sweep_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  write_status(csv, points);
  size_t next = 0, running = 0;
  bool forwarded = false;
  auto launch_next = [&] {
    while (next < points.size() && points[next].status == "done") ++next;
    if (next >= points.size()) return false;
    Point& p = points[next++];
    std::vector<std::string> a = train_args(g, p);
    if (!threads_given) a.push_back("trainer.threads=" + std::to_string(threads));
    if (std::none_of(a.begin(), a.end(), [](const std::string& o) { return o.rfind("trainer.progress=", 0) == 0; }))
      a.push_back("trainer.progress=none");
    p.pid = start_point(opt, config, a, dir / (p.label + ".log"));
    p.status = "running";
    ++running;
    std::printf("sweep: %s: started (log %s)\n", p.label.c_str(), (dir / (p.label + ".log")).c_str());
    std::fflush(stdout);
    return true;
  };
  while (true) {
    const int sig = g_sweep_signal.load();
    if (sig && !forwarded) {
      forwarded = true;
      std::printf("sweep: signal %d: stopping the running points at their next step (each saves a checkpoint)\n", sig);
      std::fflush(stdout);
      for (auto& p : points)
        if (p.status == "running") ::kill(p.pid, sig);
    }
    while (!forwarded && running < size_t(opt.parallel) && launch_next()) {
    }
    if (running == 0) break;
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, 0);
    if (pid < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (auto& p : points) {
      if (p.pid != pid || p.status != "running") continue;
      --running;
      const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      // Done only when it reached its limit (exit 0); a point stopped by a
      // signal (128 + SIGUSR1 outside SLURM, SIGTERM, ...) saved a checkpoint
      // and resumes on the next run of the sweep.
      const int sig = code > 128 ? code - 128 : 0;
      const bool stop_signal = sig == SIGTERM || sig == SIGINT || sig == SIGUSR1 || sig == SIGUSR2 || sig == SIGHUP;
      if (code == 0)
        p.status = "done";
      else if (forwarded)
        p.status = "stopped";
      else if (stop_signal)
        p.status = std::string("stopped (SIG") + sigabbrev_np(sig) + ")";
      else
        p.status = "failed (exit " + std::to_string(code) + ")";
      std::printf("sweep: %s: %s%s\n", p.label.c_str(), p.status.c_str(),
                  code && !forwarded ? (": " + last_line_of(dir / (p.label + ".log"))).c_str() : "");
      std::fflush(stdout);
      write_status(csv, points);
    }
  }
  for (auto& p : points)
    if (p.status == "running" || (forwarded && p.status == "pending")) p.status = "stopped";
  write_status(csv, points);
  print_summary(points, dir, opt);
  if (forwarded) return 128 + g_sweep_signal.load();
  return std::all_of(points.begin(), points.end(), [](const Point& p) { return p.status == "done"; }) ? 0 : 1;
}

}  // namespace gantry
