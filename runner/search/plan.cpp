#include "search/plan.hpp"

#include <algorithm>
#include <cstdio>

#include "gantry/errors.hpp"
#include "search/asha.hpp"
#include "search/pbt.hpp"

namespace fs = std::filesystem;

namespace gantry::search {

namespace {

// Keys each trial's command line sets: its directory, resume, length and pause.
bool set_by_search(const std::string& key) {
  return key == "trainer.out_dir" || key == "trainer.resume" || key == "trainer.max_steps" ||
         key == "trainer.max_epochs" || key == "trainer.pause_at_step" || key == "trainer.fast_dev_run";
}

// Keys that change what the objective measures or when it is read: the same for every trial.
bool shapes_the_objective(const std::string& key) {
  return key.rfind("metrics.quality", 0) == 0 || key == "trainer.log_every_n_steps" ||
         key == "trainer.val_every_n_steps" || key == "trainer.val_every_n_epochs" || key == "trainer.devices" ||
         key == "trainer.num_nodes";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : sep) + s;
  return out;
}

// Every distribution's bounds (or choices) through its key's own check, one
// at a time with the fixed overrides, and one trial's whole config.
void check_space(const std::string& config, const std::vector<std::string>& fixed,
                 const std::vector<Dimension>& space) {
  for (const Dimension& d : space)
    for (const std::string& v : d.extremes()) {
      std::vector<std::string> o = fixed;
      o.push_back(d.key + "=" + v);
      try {
        engine::check_system(config, o);  // the config's checks and the plugin's (system.* bounds)
      } catch (const Error& e) {
        throw ConfigError("gantry search: " + d.key + "=" + d.text + ": the value " + v + " is refused: " + e.what());
      }
    }
}

void check_interval(const char* what, int64_t every, int64_t rung, const std::string& why) {
  if (every > 0 && rung % every == 0) return;
  throw ConfigError("gantry search: the first rung (" + std::to_string(rung) + " steps) is not a multiple of " + what +
                    "=" + std::to_string(every) + ": " + why);
}

}  // namespace

std::map<std::string, std::string> Plan::settings() const {
  std::vector<std::string> rung_text, space_text;
  for (const int64_t r : rungs) rung_text.push_back(std::to_string(r));
  for (const auto& d : space) space_text.push_back(d.key + "=" + d.text);
  return {{"method", opt.method},           {"metric", opt.metric},           {"mode", opt.maximize ? "max" : "min"},
          {"rungs", join(rung_text, ",")},  {"eta", std::to_string(opt.eta)}, {"seed", std::to_string(opt.seed)},
          {"space", join(space_text, " ")}, {"fixed", join(fixed, " ")},      {"config", config}};
}

fs::path Plan::trial_dir(int t) const { return dir / trial_name(t); }
fs::path Plan::trial_log(int t) const { return dir / (trial_name(t) + ".log"); }

std::vector<std::string> Plan::train_args(const Trial& t, int64_t target, int threads) const {
  std::vector<std::string> a;  // name= names the search (its directory); a trial is trial_NNNN in it
  for (const auto& f : fixed)
    if (f.rfind("name=", 0) != 0) a.push_back(f);
  a.insert(a.end(), t.overrides.begin(), t.overrides.end());
  a.push_back("name=" + trial_name(t.id));
  a.push_back("trainer.out_dir=" + dir.string());
  a.push_back("trainer.resume=auto");
  a.push_back("trainer.max_epochs=-1");
  a.push_back("trainer.max_steps=" + std::to_string(opt.budget));
  a.push_back("trainer.pause_at_step=" + std::to_string(target < opt.budget ? target : 0));
  if (!threads_given) a.push_back("trainer.threads=" + std::to_string(threads));
  if (!progress_given) a.push_back("trainer.progress=none");
  return a;
}

Plan make_plan(const std::string& config, const std::vector<std::string>& args, const SearchOptions& opt) {
  Plan p;
  p.config = config;
  p.opt = opt;
  if (opt.method != "asha" && opt.method != "random" && opt.method != "pbt" && opt.method != "tpe")
    throw ConfigError("gantry search: --method " + opt.method + " is not known (asha, tpe, pbt or random)");
  if (opt.metric.empty()) throw ConfigError("gantry search: --metric is required (a metrics.csv column: quality_fd)");
  if (opt.trials < 1) throw ConfigError("gantry search: --trials must be >= 1");
  if (opt.budget < 1) throw ConfigError("gantry search: --budget (a trial's steps at most) must be >= 1");
  if (opt.eta < 2) throw ConfigError("gantry search: --eta must be >= 2");
  if (opt.parallel < 1) throw ConfigError("gantry search: --parallel must be >= 1");
  for (const auto& a : args) {
    const size_t eq = a.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError("gantry search: '" + a + "' is not key=value (a space is key=loguniform(1e-5,1e-3))");
    const std::string key = a.substr(0, eq), value = a.substr(eq + 1);
    if (set_by_search(key))
      throw ConfigError("gantry search: '" + key +
                        "' is set by the search for each trial (its directory, resume, --budget and rungs)");
    p.threads_given |= key == "trainer.threads";
    p.progress_given |= key == "trainer.progress";
    if (!is_distribution(value)) {
      p.fixed.push_back(a);
      continue;
    }
    if (shapes_the_objective(key))
      throw ConfigError("gantry search: '" + key + "' decides what the objective measures or when: it must be the " +
                        "same for every trial (set it to one value)");
    for (const auto& d : p.space)
      if (d.key == key) throw ConfigError("gantry search: '" + key + "' is searched twice");
    p.space.push_back(parse_dimension(key, value));
  }
  const engine::JobSettings job = engine::load_job(config, p.fixed);
  // The config's `search:` block, before the command line's distributions
  // (file order); a key the command line gives (a value or another
  // distribution) is the command line's.
  std::vector<Dimension> from_file;
  for (const auto& [key, value] : job.search_space) {
    const bool on_command_line =
        std::any_of(args.begin(), args.end(), [&](const std::string& a) { return a.rfind(key + "=", 0) == 0; });
    if (on_command_line) continue;
    const std::string where = job.where("search." + key) + ": search." + key;
    if (set_by_search(key)) throw ConfigError(where + ": '" + key + "' is set by the search for each trial");
    if (shapes_the_objective(key))
      throw ConfigError(where + ": '" + key +
                        "' decides what the objective measures or when: it must be the same for every trial");
    from_file.push_back(parse_dimension(key, value, where + ": '" + value + "': "));
  }
  p.space.insert(p.space.begin(), from_file.begin(), from_file.end());
  if (p.space.empty())
    throw ConfigError(
        "gantry search: no key has a distribution (key=loguniform(a,b), uniform(a,b), int(a,b) or "
        "choice(x,y) on the command line, or a search: block in the config); a grid is gantry sweep");
  check_space(config, p.fixed, p.space);
  p.devices = job.devices * job.num_nodes;
  if (job.num_nodes != 1)
    throw ConfigError(job.where("trainer.num_nodes") + ": gantry search runs trials on this node (trainer.num_nodes " +
                      std::to_string(job.num_nodes) + ")");
  int64_t rung = opt.rung;
  if (opt.method == "random") {
    rung = opt.budget;     // every trial to the end: no rung but the last
  } else if (rung == 0) {  // ASHA: budget / eta^2; PBT: 10 intervals
    const int64_t want = opt.method == "pbt" ? opt.budget / 10 : opt.budget / (opt.eta * opt.eta);
    rung = std::max<int64_t>(job.log_every_n_steps, want / job.log_every_n_steps * job.log_every_n_steps);
  }
  if (opt.metric.rfind("quality_", 0) == 0 && job.quality_every_n_steps == 0)
    throw ConfigError("gantry search: --metric " + opt.metric +
                      " is the quality score, which this config does not compute: set "
                      "metrics.quality_every_n_steps and metrics.quality_classifier (docs/quality.md)");
  if (rung < 1) throw ConfigError("gantry search: --rung must be >= 1");
  if (opt.budget < rung)
    throw ConfigError("gantry search: --budget " + std::to_string(opt.budget) + " is below the first rung (--rung " +
                      std::to_string(rung) + "): a trial would end before it is ever compared");
  if (rung < opt.budget) {
    check_interval("trainer.log_every_n_steps", job.log_every_n_steps, rung,
                   "a rung's score is the metrics row at its step (set --rung or trainer.log_every_n_steps)");
    if (opt.metric.rfind("quality_", 0) == 0)
      check_interval("metrics.quality_every_n_steps", job.quality_every_n_steps, rung,
                     "the quality score must be computed at every rung (docs/search.md)");
    if (opt.metric.rfind("val_", 0) == 0)
      check_interval("trainer.val_every_n_steps", job.val_every_n_steps, rung,
                     "validation must run at every rung (docs/search.md)");
  }
  p.rungs = opt.method == "pbt" ? interval_steps(rung, opt.budget) : rung_steps(rung, opt.eta, opt.budget);
  if (opt.method == "pbt" && opt.trials < 4)
    throw ConfigError("gantry search: --method pbt needs a population of 4 or more (--trials " +
                      std::to_string(opt.trials) + "): its bottom quarter copies its top quarter");
  p.dir = fs::path(job.out_dir) / job.name / "search";
  // One trial's whole config (the first draw of each distribution).
  Trial probe;
  std::mt19937_64 rng = trial_rng(opt.seed, 0, 0);
  for (const auto& d : p.space) probe.overrides.push_back(d.key + "=" + d.sample(rng));
  std::vector<std::string> a = p.train_args(probe, p.rungs.front(), 1);
  engine::load_job(config, a);
  return p;
}

}  // namespace gantry::search
