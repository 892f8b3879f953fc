// The learning rate of one optimizer over the run: from the config
// (optimizers.<name>.scheduler: linear warm-up, then constant, step decay,
// cosine or linear decay to min_lr), or the plugin's LrLambda (base * factor).
// A pure function of the interval count (batches, or epochs), set on every
// param group before each batch: a resumed run continues exactly, whatever
// the optimizer's own load() restores (LibTorch 1.13's does not restore a
// changed lr). The groups' base lrs are kept in the checkpoint.
#pragma once

#include <torch/optim/optimizer.h>

#include <functional>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "gantry/core_export.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT LrSchedule {
 public:
  /// `total`: intervals in the run (needed by cosine and linear; -1: unknown).
  /// Throws ConfigError naming `where` when the schedule needs a length it lacks.
  LrSchedule(const OptimizerOptions& options, std::vector<double> base_lrs, int64_t total, const std::string& where);
  /// The plugin's schedule: base * factor(t). `who` names it in errors.
  LrSchedule(std::function<double(int64_t)> factor, bool per_epoch, std::vector<double> base_lrs, std::string who);

  /// The lr of param group `group` at interval `t` (0 during the first).
  double lr(size_t group, int64_t t) const;
  /// Sets every param group's lr for interval `t`.
  void apply(torch::optim::Optimizer& optimizer, int64_t t) const;
  const std::vector<double>& base_lrs() const { return base_; }
  bool per_epoch() const { return options_.interval == ScheduleInterval::kEpoch; }

 private:
  OptimizerOptions options_;
  std::function<double(int64_t)> factor_;  // the plugin's, or empty
  std::string who_;
  std::vector<double> base_;
  int64_t total_;
};

/// The lr of every param group of `optimizer`, in order.
GANTRY_CORE_EXPORT std::vector<double> group_lrs(torch::optim::Optimizer& optimizer);

}  // namespace gantry
