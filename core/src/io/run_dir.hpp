// Run directories: `<out_dir>/<name>/<timestamp>/`, the experiment's
// `latest` link, and the lock that keeps two runs out of one directory.
#pragma once

#include <string>

#include "gantry/core_export.hpp"

namespace gantry {

/// Points `<experiment_dir>/latest` at its sub-folder `run_name` (a relative
/// symlink, swapped in atomically by rename). Best effort: a failure is ignored.
GANTRY_CORE_EXPORT void point_latest(const std::string& experiment_dir, const std::string& run_name);

/// Creates `<out_dir>/<name>/<YYYYmmdd-HHMMSS>[-N]/` (never reusing one) and
/// points `<out_dir>/<name>/latest` at it. Returns its path.
GANTRY_CORE_EXPORT std::string make_run_dir(const std::string& out_dir, const std::string& name);

/// Where a run's TensorBoard event files go: `<experiment>/tensorboard/<run>`,
/// beside the run directory rather than in it. TensorBoard's walk follows the
/// experiment's `latest` link, so event files inside run directories listed
/// the newest run twice (issue 44.4). Links in `run_dir` are resolved first.
GANTRY_CORE_EXPORT std::string tensorboard_dir(const std::string& run_dir);

/// An exclusive lock on a run directory (`flock` on `<run_dir>/.lock`, which
/// holds the owner's pid and host), held while the object lives: two runs
/// never write one run directory (two `trainer.resume=auto` of one
/// experiment at once). The kernel drops it when the process dies.
class GANTRY_CORE_EXPORT RunDirLock {
 public:
  /// Takes the lock or throws gantry::Error naming the pid that holds it.
  explicit RunDirLock(const std::string& run_dir);
  ~RunDirLock();
  RunDirLock(const RunDirLock&) = delete;
  RunDirLock& operator=(const RunDirLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace gantry
