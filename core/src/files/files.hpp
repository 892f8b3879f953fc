// File-system helpers: atomic writes, bounded reads, stale temp files. The
// bottom of core/src: it includes nothing of gantry's but its errors, and
// config/, io/, runtime/ and the rest include it.
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

/// Removes the temp file a write_file_atomic of this process is writing now,
/// if any: async-signal-safe (unlink), for a signal handler that exits at once
/// (a second Ctrl-C): no 24 MB `step_*.ckpt.tmp.<pid>` is left behind.
GANTRY_CORE_EXPORT void remove_noted_temp_file();

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

}  // namespace gantry
