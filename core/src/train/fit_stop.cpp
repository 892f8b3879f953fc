#include "train/fit_stop.hpp"

#include <cstring>

#include "runtime/runtime.hpp"

namespace gantry {

namespace {

std::string limit(const char* key, const std::string& value) {
  return std::string("trainer.") + key + "=" + value + " reached";
}

std::string signal_name(int sig) {
  const char* name = sigabbrev_np(sig);
  return name ? std::string("SIG") + name : "?";
}

const char* const kOtherRank = "another rank asked to stop (its output says why)";

}  // namespace

FitStop::FitStop(const TrainerOptions& trainer, int64_t total_steps)
    : t_(trainer), total_steps_(total_steps), max_time_(trainer.max_time_seconds()) {}

void FitStop::stop(const std::string& why) {
  done_ = true;
  if (reason_.empty()) reason_ = why;
}

void FitStop::at_start(const TrainState& s) {
  if (total_steps_ > 0 && s.global_step >= total_steps_)
    stop("already at step " + std::to_string(s.global_step) + " of " + std::to_string(total_steps_));
  else if (t_.pause_at_step > 0 && s.global_step >= t_.pause_at_step) {
    stop("already at step " + std::to_string(s.global_step) +
         ", trainer.pause_at_step=" + std::to_string(t_.pause_at_step) + " (paused)");
    paused_ = true;
  }
}

void FitStop::pause_reached() {
  // The ranks may have agreed on this rank's pause wish already (one rank
  // does at once); paused unless another reason (max_steps, a signal) came first.
  stop(limit("pause_at_step", std::to_string(t_.pause_at_step)) + " (paused: a resume goes on from here)");
  paused_ = reason_.find("pause_at_step") != std::string::npos;
}

std::string FitStop::wish(const TrainState& s, double elapsed_s) {
  std::string why;
  wish_kind_ = wish_signal_ = 0;
  if (t_.max_steps > 0 && s.global_step >= t_.max_steps) {
    why = limit("max_steps", std::to_string(t_.max_steps));
    wish_kind_ = 1;
  } else if (t_.pause_at_step > 0 && s.global_step >= t_.pause_at_step) {
    why = limit("pause_at_step", std::to_string(t_.pause_at_step)) + " (paused: a resume goes on from here)";
    wish_kind_ = 5;
  } else if (max_time_ > 0 && elapsed_s >= max_time_) {
    why = limit("max_time", t_.max_time);
    wish_kind_ = 2;
  } else if (const int sig = stop_requested()) {
    why = "stopped by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    wish_kind_ = 3;
    wish_signal_ = sig;
  } else if (!plugin_reason_.empty()) {
    why = "plugin asked to stop: " + plugin_reason_;
    wish_kind_ = 4;
  }
  if (!why.empty() && reason_.empty()) reason_ = why;
  return why;
}

int32_t FitStop::wish_code(int rank) const {
  if (wish_kind_ == 0) return 0;
  return (wish_kind_ << 24) | ((wish_signal_ & 0xff) << 16) | (rank & 0xffff);
}

std::string FitStop::describe_wish(int32_t code, const std::string& max_time) {
  const int kind = code >> 24, sig = (code >> 16) & 0xff, rank = code & 0xffff;
  const std::string who = "rank " + std::to_string(rank);
  switch (kind) {
    case 1:
      return who + " reached trainer.max_steps";
    case 2:
      return who + " reached trainer.max_time=" + max_time;
    case 3:
      return who + " was stopped by signal " + std::to_string(sig) + " (" + signal_name(sig) + ")";
    case 4:
      return who + "'s plugin asked to stop (its output says why)";
    case 5:
      return who + " reached trainer.pause_at_step";
    default:
      return "";
  }
}

void FitStop::after_batch(bool agreed, bool max_steps_reached, int32_t wish) {
  if (!agreed && !max_steps_reached) return;
  const std::string who = describe_wish(wish, t_.max_time);
  stop(who.empty() ? kOtherRank : who);
}

void FitStop::after_epoch(const TrainState& s) {
  // max_epochs is the reason even over a wish not yet agreed (as it ends this batch).
  if (t_.max_epochs > 0 && s.epoch >= t_.max_epochs && !done_) {
    done_ = true;
    reason_ = limit("max_epochs", std::to_string(t_.max_epochs));
  }
}

std::string bad_metric_error(const std::string& own, int64_t step) {
  return !own.empty() ? own : "step " + std::to_string(step) + ": another rank logged a NaN/Inf metric; stopping";
}

}  // namespace gantry
