// The files in a run's checkpoints/ folder, named in this one place:
//   step_<step>.ckpt        every checkpoint.every_n_steps and at the end
//                           (checkpoint.save_last); the newest keep_last kept
//   best_step_<step>.ckpt   the save_top_k best by checkpoint.monitor
//   best.ckpt               a link to the best of them
// <step> is 7 digits, zero-padded, so name order is step order up to 10^7.
// Who writes them: train/callbacks/checkpointing.cpp (step_) and
// train/callbacks/monitored.cpp (best_); who reads them: checkpoint/resolve.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry::ckpt {

/// The folder of a run directory that holds its checkpoints.
inline constexpr const char* kFolder = "checkpoints";
/// The link to the best checkpoint (checkpoint.monitor).
inline constexpr const char* kBestLink = "best.ckpt";

/// trainer_state keys of a best_step_ file: the steps and values of the
/// kept set, best first (train/callbacks/monitored.cpp writes them).
inline constexpr const char* kBestStepsKey = "best.steps";
inline constexpr const char* kBestValuesKey = "best.values";

/// "step_0001000.ckpt".
GANTRY_CORE_EXPORT std::string step_file(int64_t step);
/// "best_step_0001000.ckpt".
GANTRY_CORE_EXPORT std::string best_file(int64_t step);

/// What a file name in checkpoints/ is.
enum class FileKind {
  kOther,  ///< not a checkpoint of ours (a temp file, best.ckpt's link, anything else)
  kStep,   ///< step_<step>.ckpt
  kBest,   ///< best_step_<step>.ckpt
};
struct FileName {
  FileKind kind = FileKind::kOther;
  int64_t step = -1;
};
/// Parses a file name (no directory): step_N.ckpt and best_step_N.ckpt with their step.
GANTRY_CORE_EXPORT FileName parse_file(const std::string& name);

/// A checkpoint file in a run's checkpoints/ folder.
struct Found {
  std::string path;
  FileName name;
  int64_t mtime_ns = 0;  ///< its modification time (orders two files of one step)
};
/// The step_ and best_step_ files (not links) in `checkpoints_dir`, newest
/// first: by step, then by modification time. None when it is missing.
GANTRY_CORE_EXPORT std::vector<Found> list_files(const std::string& checkpoints_dir);

/// Deletes all but the newest `keep_last` step_*.ckpt files in
/// `checkpoints_dir` (0: keep all). best_step_ files are save_top_k's.
GANTRY_CORE_EXPORT void prune_steps(const std::string& checkpoints_dir, int64_t keep_last);

/// Points `checkpoints_dir`/best.ckpt at best_step_<step>.ckpt (a relative
/// link, swapped in atomically by rename). Returns "" or why it failed.
GANTRY_CORE_EXPORT std::string link_best(const std::string& checkpoints_dir, int64_t step);

}  // namespace gantry::ckpt
