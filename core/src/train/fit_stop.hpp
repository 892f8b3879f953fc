// Why the fit loop stops, in one place (Lightning's _FitLoop.done gathers
// every stop reason in one property): each limit, stop signal, the ranks'
// stop agreement and an epoch limit is fed to one FitStop; the loop asks
// done(), the run reports reason(). A NaN/Inf metric does not stop the loop
// here: it fails the run (bad_metric_error). Early stopping (a rule on a
// monitored metric) is one more feed.
#pragma once

#include <cstdint>
#include <string>

#include "config/config.hpp"
#include "gantry/core_export.hpp"
#include "checkpoint/file.hpp"

namespace gantry {

/// The checkpoint's trainer-state key holding the seconds the fit loops of
/// this training have run so far (trainer.max_time counts them across resumes).
inline constexpr const char* kFitTimeKey = "fit.time_elapsed_s";

class GANTRY_CORE_EXPORT FitStop {
 public:
  /// `total_steps`: the batches max_epochs and max_steps allow (-1: none).
  FitStop(const TrainerOptions& trainer, int64_t total_steps);

  /// Before the first batch: a resumed run that is already at its end.
  void at_start(const TrainState& s);
  /// This rank's own wish to stop after a batch, "" for none: max_steps,
  /// max_time (`elapsed_s`: this training's fit time, earlier runs included), a stop signal. The first
  /// wish becomes the reason (the ranks agree on it a batch later).
  std::string wish(const TrainState& s, double elapsed_s);
  /// The plugin's ctx.request_stop(reason) on this rank (ABI 1.3): a wish
  /// from the next wish() on, until the ranks agree.
  void plugin_request(const std::string& reason) {
    if (plugin_reason_.empty()) plugin_reason_ = reason;
  }
  /// This rank's last wish for the agreement: 0 for none, else
  /// kind << 24 | signal << 16 | rank (kind 1 max_steps, 2 max_time, 3 a
  /// signal, 4 the plugin asked, 5 trainer.pause_at_step), so that the largest over the ranks names
  /// one rank and why.
  int32_t wish_code(int rank) const;
  /// "rank 3 was stopped by signal 15 (SIGTERM)" for a wish code ("" for 0).
  static std::string describe_wish(int32_t code, const std::string& max_time);
  /// After a batch, or the extra agreement round at an epoch's end:
  /// `agreed`, the ranks' verdict (`wish`: its largest wish code, naming the
  /// rank that asked); `max_steps_reached` stops this rank at once (every
  /// rank reaches it at the same batch).
  void after_batch(bool agreed, bool max_steps_reached = false, int32_t wish = 0);
  /// A stop every rank decided alike after this batch (early stopping): at once.
  void now(const std::string& why) { stop(why); }
  /// After the batch trainer.pause_at_step names (every rank reaches it at
  /// the same batch): stop at once, paused (unless a limit ended it first).
  void pause_reached();
  /// Whether the run stops at trainer.pause_at_step: a resume goes on.
  bool paused() const { return paused_; }
  /// After an epoch (`s.epoch` counts it): max_epochs.
  void after_epoch(const TrainState& s);

  bool done() const { return done_; }
  /// What ended the run: "trainer.max_steps=1500 reached", "stopped by signal 15 (SIGTERM)", ...
  const std::string& reason() const { return reason_; }

 private:
  void stop(const std::string& why);  // done; the first reason recorded stays

  const TrainerOptions& t_;
  int64_t total_steps_;
  double max_time_;
  bool done_ = false;
  bool paused_ = false;
  std::string reason_;
  int wish_kind_ = 0, wish_signal_ = 0;  // this rank's last wish
  std::string plugin_reason_;            // ctx.request_stop's, "" for none
};

/// The error a NaN/Inf metric ends the run with: this rank's own message
/// (`own`, naming the value and its step) or, when another rank saw it, one
/// naming the step (`step`: the batch it happened after).
GANTRY_CORE_EXPORT std::string bad_metric_error(const std::string& own, int64_t step);

}  // namespace gantry
