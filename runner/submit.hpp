// `gantry submit`: render slurm/ templates from a config and sbatch them.
#pragma once

#include <string>
#include <vector>

#include "gantry/engine.hpp"

namespace gantry {

/// The sbatch script for `cfg`, running `gantry_exe train config_path overrides...`.
/// `array_size` > 0: a job array of that many tasks, each running its point
/// of the sweep the overrides make (`gantry sweep ... --array-task`).
/// `subcommand` and `tail`: what each array task runs (`gantry sweep ...
/// --array-task`, or a search's worker: `gantry search ... --parallel 1`).
std::string render_sbatch(const engine::JobSettings& job, const std::string& template_text,
                          const std::string& gantry_exe, const std::string& config_path,
                          const std::vector<std::string>& overrides, size_t array_size = 0,
                          const std::string& subcommand = "sweep",
                          const std::vector<std::string>& tail = {"--array-task"});

/// Prints `script` (dry_run), or writes it under <out_dir>/<name>/slurm/ and
/// sbatches it (`wait`: sbatch --wait, returning the job's exit code).
/// `what`: ", an array of 4 points" in the line saying what was submitted.
int submit_script(const engine::JobSettings& job, const std::string& script, bool dry_run, bool wait, size_t array_size,
                  const std::string& what);

/// slurm.template's file: as given, beside an installed gantry, or in the source tree.
std::string find_template(const std::string& path, const std::string& gantry_exe);

/// Renders, then prints (dry_run) or writes and sbatches the script (`wait`:
/// sbatch --wait, returning the job's exit code). Returns the process exit code.
/// `sweep`: the overrides are a grid (gantry sweep's), submitted as one job array.
int submit(const std::string& config_path, const std::vector<std::string>& overrides, bool dry_run, bool wait,
           const std::string& gantry_exe, bool sweep = false);

}  // namespace gantry
