// Training progress on the terminal: a one-line bar redrawn in place when
// stdout is a terminal, plain periodic lines otherwise (logs, CI, SLURM).
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

enum class ProgressMode;  // trainer.progress (config/config.hpp)

class GANTRY_CORE_EXPORT Progress {
 public:
  enum class Mode { kBar, kLines, kNone };
  /// trainer.progress; auto picks kBar on a terminal, kLines otherwise.
  static Mode parse_mode(ProgressMode mode, std::FILE* out);

  /// `total_steps` <= 0: unknown (no ETA).
  Progress(Mode mode, int64_t total_steps, int64_t batches_per_epoch, int64_t batch_size, std::FILE* out = stdout);

  /// Called after every step; draws at most 10 times a second (bar) or every
  /// 10 s (lines).
  void update(int64_t step, int64_t epoch, int64_t batch_in_epoch,
              const std::vector<std::pair<std::string, double>>& values);
  /// Prints a message on its own line (above the bar).
  void message(const std::string& text);
  /// Draws the final state and ends the line.
  void finish();

  /// Samples per second over the last window.
  double samples_per_second() const { return rate_; }

 private:
  void draw(bool final);

  using Clock = std::chrono::steady_clock;
  Mode mode_;
  int64_t total_, per_epoch_, batch_size_;
  std::FILE* out_;
  Clock::time_point start_, last_draw_, window_start_;
  int64_t window_step_ = 0;
  int64_t first_step_ = -1;  // the step before the first update
  double rate_ = 0;
  int64_t step_ = 0, epoch_ = 0, batch_ = 0;
  std::vector<std::pair<std::string, double>> values_;
  bool drawn_ = false;
};

/// Whether a progress bar's line is drawn and not yet ended (a terminal): an
/// error printed now starts with a newline, or it would follow the bar.
GANTRY_CORE_EXPORT bool progress_line_open();

/// "1:02:03" / "02:03".
GANTRY_CORE_EXPORT std::string format_duration(double seconds);

}  // namespace gantry
