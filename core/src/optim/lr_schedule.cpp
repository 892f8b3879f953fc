#include "optim/lr_schedule.hpp"

#include <cmath>

#include "gantry/errors.hpp"

namespace gantry {

LrSchedule::LrSchedule(const OptimizerOptions& options, std::vector<double> base_lrs, int64_t total,
                       const std::string& where)
    : options_(options), base_(std::move(base_lrs)), total_(total) {
  const bool needs_length =
      options_.scheduler == SchedulerKind::kCosine || options_.scheduler == SchedulerKind::kLinear;
  if (needs_length && total_ <= 0)
    throw ConfigError(where + ": scheduler " + choice_name(options_.scheduler) +
                      " needs the run's length: set trainer.max_steps or trainer.max_epochs");
  if (needs_length && total_ <= options_.warmup)
    throw ConfigError(where + ": warmup " + std::to_string(options_.warmup) + " is not shorter than the run (" +
                      std::to_string(total_) + " " + choice_name(options_.interval) + "s)");
}

LrSchedule::LrSchedule(std::function<double(int64_t)> factor, bool per_epoch, std::vector<double> base_lrs,
                       std::string who)
    : factor_(std::move(factor)), who_(std::move(who)), base_(std::move(base_lrs)), total_(-1) {
  options_.interval = per_epoch ? ScheduleInterval::kEpoch : ScheduleInterval::kStep;
  if (!factor_) throw PluginError(who_ + ": the LrLambda's factor is empty");
}

double LrSchedule::lr(size_t group, int64_t t) const {
  const double base = base_.at(group);
  if (factor_) {
    const double f = factor_(t);
    if (!std::isfinite(f) || f < 0)
      throw PluginError(who_ + ": factor(" + std::to_string(t) + ") is " + std::to_string(f) +
                        ", not a finite number >= 0");
    return base * f;
  }
  const int64_t w = options_.warmup;
  const double warm = t < w ? double(t + 1) / double(w) : 1.0;
  const int64_t u = std::max<int64_t>(0, t - w);
  double main = base;
  if (options_.scheduler == SchedulerKind::kStep) {
    main = base * std::pow(options_.gamma, double(u / options_.step_size));
  } else if (options_.scheduler == SchedulerKind::kCosine || options_.scheduler == SchedulerKind::kLinear) {
    const double frac = std::min(1.0, double(u) / double(total_ - w));
    const double m = options_.min_lr;
    main = options_.scheduler == SchedulerKind::kCosine ? m + (base - m) * 0.5 * (1.0 + std::cos(M_PI * frac))
                                                        : base - (base - m) * frac;
  }
  return warm * main;
}

void LrSchedule::apply(torch::optim::Optimizer& optimizer, int64_t t) const {
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size() && g < base_.size(); ++g) groups[g].options().set_lr(lr(g, t));
}

std::vector<double> group_lrs(torch::optim::Optimizer& optimizer) {
  std::vector<double> out;
  for (auto& g : optimizer.param_groups()) out.push_back(g.options().get_lr());
  return out;
}

}  // namespace gantry
