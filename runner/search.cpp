// `gantry search`: the driver that runs a search's trials on this node.
//
//   gantry search configs/gan_fashion_mnist_quality.yaml system.lr='loguniform(1e-5,1e-3)'
//       --method asha --trials 27 --budget 2700 --metric quality_fd --parallel 2
//
// Each trial is `gantry train CONFIG fixed... values... name=trial_NNNN
// trainer.out_dir=<out_dir>/<name>/search trainer.resume=auto
// trainer.max_steps=<budget> trainer.pause_at_step=<rung>`: an ordinary run
// that stops at its rung with a checkpoint (a pause: schedules still count to
// the budget) and, promoted, goes on from it exactly. Its score is its
// metrics.csv row at the rung. The journal (search/state.hpp) records every
// decision before it is acted on; a rerun of the same command reads it and
// goes on: finished trials stay finished, interrupted ones resume from their
// checkpoints. Trials run K at a time with the cores divided among them, each
// in its own process group (the terminal's Ctrl-C reaches the search, which
// forwards it once: every running trial checkpoints and stops).
#include "search.hpp"

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
#include <fstream>
#include <thread>

#include "gantry/errors.hpp"
#include "launch.hpp"
#include "sweep.hpp"
#include "submit.hpp"
#include "search/asha.hpp"
#include "search/journal.hpp"
#include "search/pbt.hpp"
#include "search/tpe.hpp"
#include "search/summary.hpp"

namespace fs = std::filesystem;

namespace gantry {

using namespace gantry::search;

namespace {

std::atomic<int> g_search_signal{0};
extern "C" void on_search_signal(int sig) { g_search_signal.store(sig); }

struct Running {
  int trial = -1;
  pid_t pid = -1;
  int64_t target = 0;
};

std::string metrics_csv(const Plan& p, int t) { return (p.trial_dir(t) / "latest" / "metrics.csv").string(); }

// gantry train (or gantry launch -n devices) for one trial, in a child of its own.
pid_t start_trial(const Plan& p, const std::vector<std::string>& args, const fs::path& log) {
  const pid_t driver = ::getpid();
  const pid_t pid = ::fork();
  if (pid != 0) return pid;
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a killed search takes its trials with it (each checkpoints)
  if (::getppid() != driver) ::_exit(143);
  const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::dup2(fd, 1);
    ::dup2(fd, 2);
  }
  ::setpgid(0, 0);
  // Under a SLURM array the worker, not its trial, is the job's task: the
  // trial must not take the job's signals as its own (nor requeue it).
  std::vector<std::string> slurm_vars;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "SLURM_", 6) == 0) slurm_vars.emplace_back(*e, std::strchr(*e, '=') - *e);
  for (const auto& v : slurm_vars) ::unsetenv(v.c_str());
  if (p.devices == 1) {
    exec_train(p.opt.gantry_exe, p.config, args);
  } else {
    std::vector<std::string> argv = {p.opt.gantry_exe, "launch", "-n", std::to_string(p.devices), p.config};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> c;
    for (auto& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    ::execv(p.opt.gantry_exe.c_str(), c.data());
  }
  std::fprintf(stderr, "gantry search: cannot run %s: %s\n", p.opt.gantry_exe.c_str(), std::strerror(errno));
  ::_exit(127);
}

// The journal's settings against this command's: the same search, or one line saying what differs.
void check_settings(Journal& j, const Plan& p) {
  const auto want = p.settings();
  const SearchState& s = j.state();
  if (s.settings.empty()) {
    std::vector<std::string> f = {"search"};
    for (const auto& [k, v] : want) f.push_back(k + "=" + v);
    j.append(f);
    return;
  }
  bool scored = false;
  for (const auto& t : s.trials) scored |= !t.scores.empty();
  std::vector<std::string> changed;
  for (const auto& [k, v] : want) {
    const auto it = s.settings.find(k);
    const std::string before = it == s.settings.end() ? "" : it->second;
    if (before == v) continue;
    if (!scored && (k == "metric" || k == "mode")) {  // no decision read it yet: a corrected --metric
      changed.push_back(k + "=" + v);
      continue;
    }
    throw ConfigError("gantry search: " + p.dir.string() + " holds a search whose " + k + " is '" + before +
                      "', not '" + v + "': rerun it with its own settings, or give this one another name=");
  }
  if (!changed.empty()) {
    changed.insert(changed.begin(), "search");
    j.append(changed);
  }
}

// Under the lock: trials the journal says are running whose search is gone
// (killed on this host, or a worker whose lease ran out). Their processes
// got SIGTERM with it and checkpoint: once gone (on this host; another
// host's died with its worker, or its lease would hold), each is marked
// interrupted and goes on first, from its checkpoint. `first`: this search
// just started, and a trial that failed (a crash, a kill) is tried again, as
// gantry sweep does: one more attempt each time the search runs.
void take_over(Journal& j, const Plan& p, const std::string& me, bool first) {
  const fs::path workers = p.dir / "workers";
  const std::string here = me.substr(0, me.rfind(':'));
  for (size_t i = 0; i < j.state().trials.size(); ++i) {
    const Trial& t = j.state().trials[i];
    if (first && t.status == Status::kFailed) {
      std::printf("search: %s: failed in an earlier run of the search (%s): tried again\n", trial_name(t.id).c_str(),
                  t.note.c_str());
      j.append({"end", std::to_string(t.id), "interrupted", "tried again: it failed in an earlier run of the search"});
      continue;
    }
    if (t.status != Status::kRunning || t.worker == me) continue;
    if (!t.worker.empty() && worker_alive(t.worker, workers, p.opt.lease_s)) continue;
    const bool local = t.worker.empty() || t.worker.substr(0, t.worker.rfind(':')) == here;
    if (local && t.pid > 0 && ::kill(pid_t(t.pid), 0) == 0) continue;  // still checkpointing: look again later
    const std::string id = std::to_string(t.id), name = trial_name(t.id);
    if (t.score_at(t.target)) {  // killed between its score and its end: it reached its target
      j.append({"end", id, t.target >= p.opt.budget ? "done" : "paused", ""});
      continue;
    }
    const bool lease = !local;
    j.append({"end", id, "interrupted",
              lease ? "its worker " + t.worker + " stopped renewing its lease" : "the search stopped while it ran"});
    if (lease)
      std::printf(
          "search: %s: interrupted (its worker %s is gone: no lease for %g s): it goes on from its checkpoint\n",
          name.c_str(), t.worker.c_str(), p.opt.lease_s);
    else
      std::printf("search: %s: interrupted (the search was stopped): it goes on from its checkpoint\n", name.c_str());
  }
  std::fflush(stdout);
}

// The values of trial `id`: drawn from its own generator, or (tpe) by the
// Parzen estimator from the scores so far.
std::vector<std::string> sample_trial(const Plan& p, const SearchState& s, int id) {
  std::vector<std::string> f = {"new", std::to_string(id)};
  if (p.opt.method == "tpe") {
    const Tpe tpe{&p.space, p.opt.maximize, p.opt.seed, tpe_startup(p.opt.trials)};
    const auto v = tpe.sample(s, id);
    f.insert(f.end(), v.begin(), v.end());
    return f;
  }
  std::mt19937_64 rng = trial_rng(p.opt.seed, uint64_t(id), 0);
  for (const auto& d : p.space) f.push_back(d.key + "=" + d.sample(rng));
  return f;
}

std::string values_text(const Trial& t) {
  std::string s;
  for (const auto& o : t.overrides) s += (s.empty() ? "" : " ") + o.substr(o.rfind('.', o.find('=')) + 1);
  return s;
}

// After trial r ended with `code`: its score at the target, or why it has none.
// Returns a line that ends the whole search ("" to go on).
std::string record_end(Journal& j, const Plan& p, const Running& r, int code, bool stopping) {
  const std::string id = std::to_string(r.trial), name = trial_name(r.trial);
  const fs::path log = p.trial_log(r.trial);
  // Stopped by a signal of its own (a SLURM preemption reaches every process of the job, a user's kill):
  // it checkpointed, and goes on.
  const bool signalled = code == 129 || code == 130 || code == 138 || code == 140 || code == 143;
  if (code != 0) {
    const std::string last = last_line_of(log);
    std::string status = stopping || signalled ? "interrupted" : "failed";
    if (!stopping && (last.find("NaN") != std::string::npos || last.find("nan") != std::string::npos))
      status = "stopped";  // diverged: a NaN/Inf metric ended it
    j.append({"end", id, status,
              stopping    ? "the search was stopped"
              : signalled ? "stopped by signal " + std::to_string(code - 128)
                          : last});
    std::printf("search: %s: %s%s\n", name.c_str(), status.c_str(), stopping ? "" : (": " + last).c_str());
    return "";
  }
  const engine::MetricSeries m = engine::metric_series(metrics_csv(p, r.trial), p.opt.metric);
  if (std::find(m.columns.begin(), m.columns.end(), p.opt.metric) == m.columns.end()) {
    std::string logged;
    for (const auto& c : m.columns)
      if (c != "step" && c != "epoch" && c != "wall_time" && c != "kind") logged += (logged.empty() ? "" : ", ") + c;
    j.append({"end", id, "interrupted", "no " + p.opt.metric + " in its metrics.csv"});
    return "gantry search: --metric " + p.opt.metric + ": " + name + " logs no such metric (its metrics.csv has " +
           (logged.empty() ? std::string("none") : logged) + "); rerun with --metric set to one of them";
  }
  int64_t step = -1;
  std::string value;
  for (size_t i = 0; i < m.steps.size(); ++i)
    if (m.steps[i] <= r.target) step = m.steps[i], value = m.values[i];
  if (step < 0) {
    j.append({"end", id, "failed", "metrics.csv has no " + p.opt.metric + " by step " + std::to_string(r.target)});
    std::printf("search: %s: failed: no %s by step %ld\n", name.c_str(), p.opt.metric.c_str(), long(r.target));
    return "";
  }
  const double v = std::strtod(value.c_str(), nullptr);
  const Trial& t = j.state().trials[size_t(r.trial)];
  if (!t.score_at(step)) j.append({"score", id, std::to_string(step), std::isfinite(v) ? value : "nan"});
  if (!std::isfinite(v)) {
    j.append({"end", id, "stopped", "diverged: " + p.opt.metric + " is " + value + " at step " + std::to_string(step)});
    std::printf("search: %s: stopped: diverged (%s %s at step %ld)\n", name.c_str(), p.opt.metric.c_str(),
                value.c_str(), long(step));
    return "";
  }
  const bool done = r.target >= p.opt.budget || step < r.target;  // the budget, or it ended by itself
  const std::string why = step < r.target ? "ended at step " + std::to_string(step) + ": " + last_line_of(log) : "";
  j.append({"end", id, done ? "done" : "paused", why});
  std::printf("search: %s: %s at step %ld, %s %s\n", name.c_str(), done ? "done" : "paused", long(step),
              p.opt.metric.c_str(), value.c_str());
  return "";
}

// PBT's exploits at `step`: each recorded (before its checkpoint is copied,
// so a rerun redoes a copy the killed search began: the same file), then
// the step is decided and the next interval starts.
void exploit_at(Journal& j, const Plan& p, const Pbt& pbt, int64_t step) {
  for (const Exploit& e : pbt.decide(j.state(), step)) {
    const Trial& t = j.state().trials[size_t(e.trial)];
    const bool recorded = !t.lineage.empty() && t.lineage.back().step == step;
    if (!recorded) {
      std::vector<std::string> f = {"exploit", std::to_string(e.trial), std::to_string(e.from), std::to_string(step),
                                    std::to_string(e.seed)};
      f.insert(f.end(), e.overrides.begin(), e.overrides.end());
      const std::string was = values_text(t);
      j.append(f);
      std::printf("search: %s: exploit %s's checkpoint at step %ld, explore %s -> %s\n", trial_name(e.trial).c_str(),
                  trial_name(e.from).c_str(), long(step), was.c_str(),
                  values_text(j.state().trials[size_t(e.trial)]).c_str());
    }
    engine::exploit_checkpoint(p.trial_dir(e.from).string(), p.trial_dir(e.trial).string(), step,
                               j.state().trials[size_t(e.trial)].lineage.back().seed);
  }
  j.append({"decided", std::to_string(step)});
  std::fflush(stdout);
}

// `--submit W`: a SLURM array of W workers, each this command with
// --parallel 1, taking trials from the journal.
int submit_workers(const std::string& config, const std::vector<std::string>& args, const SearchOptions& opt,
                   const Plan& p) {
  std::vector<std::string> tail = {"--method",
                                   opt.method,
                                   "--trials",
                                   std::to_string(opt.trials),
                                   "--budget",
                                   std::to_string(opt.budget),
                                   "--metric",
                                   opt.metric,
                                   opt.maximize ? "--max" : "--min",
                                   "--rung",
                                   std::to_string(p.rungs.front()),
                                   "--eta",
                                   std::to_string(opt.eta),
                                   "--seed",
                                   std::to_string(opt.seed),
                                   "--lease",
                                   format_value(opt.lease_s),
                                   "--parallel",
                                   "1"};
  const engine::JobSettings job = engine::load_job(config, p.fixed);
  const std::string script =
      render_sbatch(job, engine::read_file(find_template(job.slurm.template_path, opt.gantry_exe)), opt.gantry_exe,
                    config, args, size_t(opt.submit_workers), "search", tail);
  return submit_script(job, script, opt.dry_run, opt.wait, size_t(opt.submit_workers),
                       ", an array of " + std::to_string(opt.submit_workers) + " search workers on " + p.dir.string());
}

// Starts trials until `slots` run here, as the method decides under the
// journal's lock (after what other workers appended). False: nothing is left
// to run, here or anywhere.
bool start_what_fits(Journal& j, const Plan& p, const Asha& asha, const Pbt& pbt, int slots, int threads,
                     const std::string& me, std::vector<Running>& running, bool& waiting_said) {
  const bool is_pbt = p.opt.method == "pbt";
  // Decide under the journal's lock, after what other workers appended.
  const auto lock = j.lock(p.opt.lease_s);
  take_over(j, p, me, false);
  if (is_pbt)
    if (const int64_t step = pbt.decide_at(j.state()); step > 0) exploit_at(j, p, pbt, step);
  while (int(running.size()) < slots) {
    const Action a = is_pbt ? pbt.next(j.state()) : asha.next(j.state());
    if (a.kind == Action::Kind::kNone) break;
    if (a.kind == Action::Kind::kNew && size_t(a.trial) == j.state().trials.size())
      j.append(sample_trial(p, j.state(), a.trial));
    const Trial& t = j.state().trials[size_t(a.trial)];
    const char* how = t.status == Status::kInterrupted ? "goes on"
                      : t.scores.empty()               ? "started"
                      : is_pbt                         ? "trains on"
                                                       : "promoted";
    const pid_t pid = start_trial(p, p.train_args(t, a.target, threads), p.trial_log(t.id));
    j.append({"run", std::to_string(t.id), std::to_string(a.target), std::to_string(pid), me});
    running.push_back({t.id, pid, a.target});
    std::printf("search: %s: %s to step %ld (%s; log %s)\n", trial_name(t.id).c_str(), how, long(a.target),
                values_text(t).c_str(), p.trial_log(t.id).c_str());
    std::fflush(stdout);
    waiting_said = false;
  }
  if (running.empty()) {
    if (j.state().count(Status::kRunning) == 0) return false;  // nothing left to run, here or anywhere
    if (!waiting_said)
      std::printf("search: nothing to start now: %zu trials run elsewhere (other workers); waiting for them\n",
                  j.state().count(Status::kRunning));
    waiting_said = true;
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

int run_search(const std::string& config, const std::vector<std::string>& args, const SearchOptions& opt) {
  const Plan p = make_plan(config, args, opt);
  const fs::path journal_path = p.dir / "journal";
  if (opt.summary_only) {
    const Journal j(journal_path, false);
    if (j.state().settings.empty()) throw Error("gantry search --summary: no search has run in " + p.dir.string());
    print_summary(j.state(), p);
    return 0;
  }
  if (opt.submit_workers > 0) return submit_workers(config, args, opt, p);  // nothing runs here
  std::error_code ec;
  fs::create_directories(p.dir, ec);
  if (ec) throw Error("cannot create " + p.dir.string() + ": " + ec.message());
  Journal j(journal_path, true);
  const std::string me = this_worker();
  renew_lease(p.dir / "workers");
  {
    const auto lock = j.lock(opt.lease_s);
    if (!j.note().empty()) std::printf("search: journal %s: %s\n", journal_path.c_str(), j.note().c_str());
    check_settings(j, p);
    take_over(j, p, me, true);
  }
  const Asha asha{p.rungs, opt.eta, opt.trials, opt.maximize};
  const Pbt pbt{p.rungs, opt.trials, opt.maximize, opt.seed, &p.space};
  const bool is_pbt = opt.method == "pbt";
  const int slots = std::min(opt.parallel, opt.trials);
  const int threads = std::max(1, engine::available_cores() / (slots * int(p.devices)));
  std::string rung_text;
  for (const int64_t r : p.rungs) rung_text += (rung_text.empty() ? "" : ", ") + std::to_string(r);
  std::printf(
      "search: %s, %d trials over %zu %s of %s, %s at steps %s, %s %s; %zu trials in the journal; %d at a "
      "time%s\n",
      opt.method.c_str(), opt.trials, p.space.size(), p.space.size() == 1 ? "key" : "keys", config.c_str(),
      is_pbt ? "intervals end" : "rungs", rung_text.c_str(), opt.maximize ? "max" : "min", opt.metric.c_str(),
      j.state().trials.size(), slots,
      p.threads_given ? "" : (", " + std::to_string(threads) + " threads each").c_str());
  std::fflush(stdout);

  struct sigaction sa {};
  sa.sa_handler = on_search_signal;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);  // SLURM's --signal=USR1@N: a preemption coming
  sigaction(SIGUSR2, &sa, nullptr);
  std::vector<Running> running;
  bool forwarded = false;
  std::string fatal;
  auto renewed = std::chrono::steady_clock::now();
  bool waiting_said = false;
  while (true) {
    const int sig = g_search_signal.load();
    if ((sig || !fatal.empty()) && !forwarded) {
      forwarded = true;
      if (sig)
        std::printf("search: signal %d: stopping the running trials at their next step (each saves a checkpoint)\n",
                    sig);
      std::fflush(stdout);
      for (const auto& r : running) ::kill(r.pid, sig == SIGINT ? SIGINT : SIGTERM);
    }
    if (forwarded && running.empty()) break;
    if (!forwarded && int(running.size()) < slots) {
      if (!start_what_fits(j, p, asha, pbt, slots, threads, me, running, waiting_said)) break;
    }
    // Wait up to 0.5 s for one of ours to end; the lease is renewed meanwhile.
    int status = 0;
    pid_t pid = 0;
    for (int i = 0; i < 10 && pid == 0 && (forwarded || !g_search_signal.load()); ++i) {
      pid = running.empty() ? 0 : ::waitpid(-1, &status, WNOHANG);
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      if (std::chrono::steady_clock::now() - renewed > std::chrono::duration<double>(opt.lease_s / 6)) {
        renew_lease(p.dir / "workers");
        renewed = std::chrono::steady_clock::now();
      }
    }
    if (pid <= 0) continue;
    const auto it = std::find_if(running.begin(), running.end(), [&](const Running& r) { return r.pid == pid; });
    if (it == running.end()) continue;
    const Running r = *it;
    running.erase(it);
    const int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    const auto lock = j.lock(opt.lease_s);
    const Trial& t = j.state().trials[size_t(r.trial)];
    if (t.status != Status::kRunning || t.worker != me) {
      std::printf("search: %s: taken over by %s while it ran here (this worker's lease ran out): not recorded\n",
                  trial_name(r.trial).c_str(), t.worker.c_str());
      continue;
    }
    const std::string line = record_end(j, p, r, code, forwarded && fatal.empty());
    if (!line.empty() && fatal.empty()) fatal = line;
    std::fflush(stdout);
  }
  { const auto lock = j.lock(opt.lease_s); }
  print_summary(j.state(), p);
  if (!fatal.empty()) throw ConfigError(fatal);
  const int sig = g_search_signal.load();
  const char* job = std::getenv("SLURM_JOB_ID");
  if (forwarded && (sig == SIGUSR1 || sig == SIGUSR2) && job) {  // preempted: the worker comes back, its trials go on
    const std::string cmd = std::string("scontrol requeue ") + job + " 2>&1";
    const int rc = std::system(cmd.c_str());
    if (rc == 0) {
      std::printf("search: requeued SLURM job %s: its trials go on from their checkpoints when it restarts\n", job);
      return 0;
    }
    std::printf("search: scontrol requeue %s failed (exit %d): rerun the search to go on\n", job, rc);
  }
  if (forwarded) return 128 + sig;
  return j.state().count(Status::kFailed) ? 1 : 0;
}

}  // namespace gantry
