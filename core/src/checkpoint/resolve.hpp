// Which checkpoint a path means: the one resolution that train's resume,
// sample, serve (and its --watch), validate and the quality score's
// classifier use, so that one argument gives one file everywhere, said in
// one line with why.
//
// `given` may be
//   a checkpoint file, through any links (latest/checkpoints/step_N.ckpt);
//   a run directory (<out_dir>/<name>/<run>, or <out_dir>/<name>/latest);
//   an experiment directory (<out_dir>/<name>: its runs' checkpoints);
//   DIR/best, DIR/last or DIR/step_0001000 for a file of DIR/checkpoints/.
// In a directory, a resume takes the newest valid checkpoint (by step, then
// time); inference takes best.ckpt when the run kept one (checkpoint.monitor)
// and the newest otherwise: Lightning's ckpt_path "last" and "best".
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "checkpoint/file.hpp"
#include "gantry/core_export.hpp"

namespace gantry {

/// What a checkpoint is wanted for, which decides the file a directory means.
enum class CheckpointUse {
  kResume,     ///< the newest valid one: training goes on where it stopped
  kInference,  ///< best.ckpt when the run has one, else the newest valid one
};

/// A resolved checkpoint: the file, read once, and why it was taken.
struct GANTRY_CORE_EXPORT ResolvedCheckpoint {
  /// The file with every link resolved (canonical): a run directory taken
  /// from it is the real one, never `latest`. "" when a directory held no
  /// valid checkpoint (found() false).
  std::string path;
  /// One line: which file, and why it is the one ("run/checkpoints/best.ckpt
  /// -> best_step_0001876.ckpt: quality_fd 187.2 at step 1876 (checkpoint.monitor
  /// quality_fd min)").
  std::string why;
  /// The file, read and verified: load from it without reading it again.
  std::shared_ptr<const CheckpointFile> file;
  bool found() const { return file != nullptr; }
};

/// Resolves `given` (see above). A file that does not read throws
/// CheckpointError naming it; so does a `given` that does not exist. A
/// directory whose checkpoints are all unreadable or absent gives found()
/// false, each unreadable file a line in `skipped` ("skipping <why>").
GANTRY_CORE_EXPORT ResolvedCheckpoint resolve_checkpoint(const std::string& given, CheckpointUse use,
                                                         std::vector<std::string>* skipped = nullptr);

/// resolve_checkpoint(), and a CheckpointError naming `given` when nothing
/// valid is in it: for commands that need a file (sample, serve, evaluate).
GANTRY_CORE_EXPORT ResolvedCheckpoint require_checkpoint(const std::string& given, CheckpointUse use);

/// The files resolve_checkpoint() would try for `given`, in its order, read
/// nothing (serve --watch compares the first with the one it serves before
/// reading anything).
GANTRY_CORE_EXPORT std::vector<std::string> checkpoint_candidates(const std::string& given, CheckpointUse use);

}  // namespace gantry
