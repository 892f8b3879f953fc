// `gantry launch`: local multi-process data-parallel training (see launch.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gantry {

struct LaunchOptions {
  std::string gantry_exe;                           ///< the gantry binary to run per rank
  std::chrono::milliseconds grace{10000};           ///< SIGTERM -> SIGKILL after a rank failed
};

/// Runs `n` ranks of `gantry train config overrides...` and waits for them.
/// Returns 0, or the exit code of the first rank that failed (128 + signal).
int launch(int n, const std::string& config, std::vector<std::string> overrides,
           const LaunchOptions& opt);

}  // namespace gantry
