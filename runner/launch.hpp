// `gantry launch`: local multi-process data-parallel training (see launch.cpp).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace gantry {

struct LaunchOptions {
  std::string gantry_exe;                  ///< the gantry binary to run per rank
  std::chrono::milliseconds grace{10000};  ///< SIGTERM -> SIGKILL after a rank failed
};

/// Runs `n` ranks of `gantry train config overrides...` and waits for them.
/// Returns 0, or the exit code of the first rank that failed (128 + signal).
int launch(int n, const std::string& config, std::vector<std::string> overrides, const LaunchOptions& opt);

/// Becomes `gantry train CONFIG ARGS...` (execv of `gantry_exe`); returns
/// only when that failed (errno says why).
void exec_train(const std::string& gantry_exe, const std::string& config, const std::vector<std::string>& args);

}  // namespace gantry
