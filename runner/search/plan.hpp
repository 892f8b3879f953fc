// What `gantry search CONFIG overrides... --method ...` means, checked before
// any trial runs (docs/search.md): the space, the fixed overrides, the rungs,
// the search's directory, and what each trial's `gantry train` gets.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "gantry/engine.hpp"
#include "search/space.hpp"
#include "search/state.hpp"

namespace gantry::search {

struct SearchOptions {
  std::string gantry_exe;              ///< the gantry binary each trial runs
  std::string method = "asha";         ///< asha | random
  int trials = 0;                      ///< how many trials are sampled
  int64_t budget = 0;                  ///< a trial's steps when it runs to the end (the last rung)
  std::string metric;                  ///< the metrics.csv column rungs compare
  bool maximize = false;               ///< larger is better (else smaller)
  int parallel = 1;                    ///< trials at a time; the cores are divided among them
  int64_t rung = 0;                    ///< the first rung's steps (0: budget / eta^2, a multiple of log_every_n_steps)
  int64_t eta = 3;                     ///< the halving factor: the top 1/eta of a rung go on
  uint64_t seed = 0;                   ///< the sampler's seed
  bool summary_only = false;           ///< print the leaderboard, run nothing
  int submit_workers = 0;              ///< > 0: sbatch an array of this many workers instead of running here
  bool dry_run = false, wait = false;  ///< with submit_workers: print the script; sbatch --wait
  double lease_s = 60;                 ///< a worker that has not renewed its lease for this long is gone
};

struct Plan {
  std::string config;
  SearchOptions opt;
  std::vector<std::string> fixed;  ///< key=value overrides of every trial
  std::vector<Dimension> space;
  std::vector<int64_t> rungs;  ///< steps; the last is the budget
  bool threads_given = false, progress_given = false;
  int64_t devices = 1;        ///< ranks of one trial (trainer.devices)
  std::filesystem::path dir;  ///< <out_dir>/<name>/search

  /// The settings the journal's first record holds (a rerun must match them).
  std::map<std::string, std::string> settings() const;
  /// Trial `t`'s experiment directory (trial_0007) and output log.
  std::filesystem::path trial_dir(int t) const;
  std::filesystem::path trial_log(int t) const;
  /// What `gantry train CONFIG` gets for trial `t` run to `target` steps.
  std::vector<std::string> train_args(const Trial& t, int64_t target, int threads) const;
};

/// Parses and checks the command (throws ConfigError, one line naming the
/// culprit): distributions, each bound against its key's own check, the
/// rungs against log_every_n_steps (and the quality score's or validation's
/// interval when the metric is theirs), the budget, the method.
Plan make_plan(const std::string& config, const std::vector<std::string>& args, const SearchOptions& opt);

}  // namespace gantry::search
