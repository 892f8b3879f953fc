// `gantry submit`: render slurm/ templates from a config and sbatch them.
#pragma once

#include <string>
#include <vector>

#include "config/config.hpp"

namespace gantry {

/// The sbatch script for `cfg`, running `gantry_exe train config_path overrides...`.
std::string render_sbatch(const ExperimentConfig& cfg, const std::string& template_text,
                          const std::string& gantry_exe, const std::string& config_path,
                          const std::vector<std::string>& overrides);

/// Renders, then prints (dry_run) or writes and sbatches the script (`wait`:
/// sbatch --wait, returning the job's exit code). Returns the process exit code.
int submit(const std::string& config_path, const std::vector<std::string>& overrides, bool dry_run,
           bool wait, const std::string& gantry_exe);

}  // namespace gantry
