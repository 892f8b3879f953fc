// File-system helpers: atomic writes and run directories.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

/// Writes `bytes` to `path` atomically: a temp file beside it, fsync, rename,
/// fsync of the directory. A crash leaves either the old file or the new one,
/// never half of one. Throws gantry::Error naming the path.
GANTRY_CORE_EXPORT void write_file_atomic(const std::string& path, const std::string& bytes);

/// Removes write_file_atomic's temp files (`<name>.tmp.<pid>`) in `dir` and
/// its direct sub-folders whose writer is gone (a process of this host that
/// no longer exists: a run killed mid-write, a second Ctrl-C during the final
/// checkpoint). A live pid's file is left alone. Returns what it removed.
GANTRY_CORE_EXPORT std::vector<std::string> remove_stale_temp_files(const std::string& dir);

/// Reads a whole regular file of at most `max_bytes`; throws gantry::Error
/// naming the path: missing, not a regular file (a directory, a FIFO that
/// would block, /dev/zero that never ends), larger than `max_bytes`, or more
/// than memory holds. `what` names the file in the line ("config file").
GANTRY_CORE_EXPORT std::string read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                                         const std::string& what = "file");

/// Points `<experiment_dir>/latest` at its sub-folder `run_name` (a relative
/// symlink, swapped in atomically by rename). Best effort: a failure is ignored.
GANTRY_CORE_EXPORT void point_latest(const std::string& experiment_dir, const std::string& run_name);

/// Creates `<out_dir>/<name>/<YYYYmmdd-HHMMSS>[-N]/` (never reusing one) and
/// points `<out_dir>/<name>/latest` at it. Returns its path.
GANTRY_CORE_EXPORT std::string make_run_dir(const std::string& out_dir, const std::string& name);

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
