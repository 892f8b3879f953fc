// `gantry launch`: local multi-process data-parallel training (see launch.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace gantry {

struct LaunchOptions {
  std::string gantry_exe;                  ///< the gantry binary to run per rank
  std::chrono::milliseconds grace{10000};  ///< SIGTERM -> SIGKILL after a rank failed
  /// When set, each rank runs this in the forked child instead of exec'ing
  /// `gantry_exe train`: the ranks then share the launcher's pages of
  /// LibTorch that the dynamic linker relocated and its static initializers
  /// wrote (~35 MiB a rank otherwise: 4.4 GiB at 128 ranks) and skip loading
  /// it. Used only while the launcher has one thread (the only one a forked
  /// child keeps); otherwise, or with GANTRY_LAUNCH_EXEC=1, the ranks exec.
  /// Returns the rank's exit code.
  std::function<int(const std::string& config, const std::vector<std::string>& overrides)> train_in_child;
};

/// Runs `n` ranks of `gantry train config overrides...` and waits for them.
/// Returns 0, or the exit code of the first rank that failed (128 + signal).
int launch(int n, const std::string& config, std::vector<std::string> overrides, const LaunchOptions& opt);

/// Becomes `gantry train CONFIG ARGS...` (execv of `gantry_exe`); returns
/// only when that failed (errno says why).
void exec_train(const std::string& gantry_exe, const std::string& config, const std::vector<std::string>& args);

}  // namespace gantry
