// Every rank: each optimizer's optimizers.<name>.scheduler sets its lr before
// every batch (interval step) or epoch (interval epoch), the same on every
// rank; rank 0 logs it as lr-<name> in each metrics row (the lr of its first
// param group in the row's last batch). The base lrs go into the checkpoint
// (trainer_state "lr_base.<name>") and come back from it on resume.
#include "train/callback.hpp"
#include "train/lr_schedule.hpp"

namespace gantry {

namespace {

class LrSchedulerCallback final : public Callback {
 public:
  explicit LrSchedulerCallback(FitState& fit) {
    const ExperimentConfig& cfg = fit.cfg();
    for (const auto& o : fit.model.optimizers()) {
      const OptimizerOptions options = cfg.optimizer(o.name);
      if (options.scheduler == "none" && options.warmup == 0) continue;
      const std::string key = "lr_base." + o.name;
      std::vector<double> base = group_lrs(*o.optimizer);
      const auto saved = fit.state.extra.find(key);
      if (saved != fit.state.extra.end()) {  // resumed: the schedule's own base, not what load() left
        const auto t = saved->second.to(torch::kFloat64).contiguous();
        base.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
      }
      const bool epochs = options.interval == "epoch";
      int64_t total = fit.total_steps;
      if (epochs)
        total = cfg.trainer.max_epochs > 0 ? cfg.trainer.max_epochs
                : fit.total_steps > 0      ? (fit.total_steps + fit.per_epoch - 1) / fit.per_epoch
                                           : -1;
      const std::string where = cfg.where("optimizers." + o.name + ".scheduler") + ": optimizers." + o.name;
      schedules_.push_back({o.name, o.optimizer, LrSchedule(options, base, total, where)});
      fit.state.extra[key] = torch::tensor(base, torch::kFloat64);
    }
  }

  void on_batch_start(FitState& fit) override {
    for (auto& s : schedules_)
      s.schedule.apply(*s.optimizer, s.schedule.per_epoch() ? fit.state.epoch : fit.state.global_step);
  }

  void on_log_step(FitState& fit) override { log(fit); }
  void on_fit_end(FitState& fit) override {
    if (!fit.interval.empty()) log(fit);  // the final row's
  }

 private:
  void log(FitState& fit) {
    if (!fit.out) return;
    Values lrs;
    for (auto& s : schedules_) lrs.emplace_back("lr-" + s.name, s.optimizer->param_groups().front().options().get_lr());
    fit.interval.add(lrs);
  }

  struct Scheduled {
    std::string name;
    std::shared_ptr<torch::optim::Optimizer> optimizer;
    LrSchedule schedule;
  };
  std::vector<Scheduled> schedules_;
};

}  // namespace

std::unique_ptr<Callback> lr_scheduler_callback(FitState& fit) {
  return std::make_unique<LrSchedulerCallback>(fit);
}

}  // namespace gantry
