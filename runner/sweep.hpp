// `gantry sweep CONFIG key=a,b key2=x,y [--parallel N]`: the grid of
// overrides, each point a run of its own, run locally N at a time (see sweep.cpp).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace gantry {

struct SweepOptions {
  std::string gantry_exe;     ///< the gantry binary each point runs (`gantry train`)
  int parallel = 1;           ///< points at a time; the cores are divided among them
  std::string metric;         ///< the summary's "best" column (metrics.csv); empty: the first metric
  bool maximize = false;      ///< best = largest (else smallest)
  bool summary_only = false;  ///< print the summary of what has run, run nothing
  bool array_task = false;    ///< run only point SLURM_ARRAY_TASK_ID, as `gantry train` (gantry submit --sweep)
};

/// The number of points of the grid `args` makes; every point's config is
/// checked (throws ConfigError naming the point).
size_t sweep_size(const std::string& config, const std::vector<std::string>& args);

/// Runs every point of the grid that is not done yet and prints a summary.
/// `args`: key=value overrides; a value with commas is an axis of the grid.
/// Returns 0 when every point is done, 1 when one failed, 128 + signal when stopped.
int sweep(const std::string& config, const std::vector<std::string>& args, const SweepOptions& opt);

/// The last non-empty line of a point's or trial's output log ("" when none):
/// what a failure's one line quotes.
std::string last_line_of(const std::filesystem::path& log);

}  // namespace gantry
