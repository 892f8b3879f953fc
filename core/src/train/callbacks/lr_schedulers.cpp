// Every rank: each optimizer's optimizers.<name>.scheduler, or else the
// plugin's own LrLambda (System::configure_schedulers, ABI 1.1), sets its lr
// before every batch (interval step) or epoch (interval epoch), the same on
// every rank; rank 0 logs it as lr-<name> in each metrics row (the lr of its first
// param group in the row's last batch). The base lrs go into the checkpoint
// (trainer_state "lr_base.<name>") and come back from it on resume.
#include <cstdio>
#include <map>

#include "train/callback.hpp"
#include "optim/lr_schedule.hpp"

namespace gantry {

namespace {

// "0.0002" or "[0.0002, 0.001]" (one per param group).
std::string lrs_text(const std::vector<double>& lrs) {
  std::string s;
  char buf[32];
  for (size_t i = 0; i < lrs.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%g", lrs[i]);
    s += (i ? ", " : "") + std::string(buf);
  }
  return lrs.size() == 1 ? s : "[" + s + "]";
}

// The lrs configure_optimizers() built from this config, recorded in every
// checkpoint (`lr_built.<name>`). A resume whose config builds others (a
// changed system.lr) takes the new ones instead of the checkpoint's, and says
// so; a checkpoint without the record (an older gantry) keeps its own.
bool lr_built_changed(FitState& fit, const TensorMap& saved, TensorMap& state, const NamedOptimizer& o) {
  const std::vector<double>& built = fit.model.built_lrs(o.name);
  const std::string key = "lr_built." + o.name;
  bool changed = false;
  if (const auto rec = saved.find(key); rec != saved.end()) {
    const torch::Tensor t = rec->second.to(torch::kFloat64).contiguous();
    const std::vector<double> was(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
    changed = was != built;
    if (changed && fit.accel.dist().rank == 0)
      std::printf("resume: optimizer %s's lr %s -> %s (as this config builds it)\n", o.name.c_str(),
                  lrs_text(was).c_str(), lrs_text(built).c_str());
  }
  state[key] = torch::tensor(built, torch::kFloat64);
  return changed;
}

void set_lrs(torch::optim::Optimizer& optimizer, const std::vector<double>& lrs) {
  auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size() && g < lrs.size(); ++g) groups[g].options().set_lr(lrs[g]);
}

// A schedule that ends with the run (cosine, linear) over another length than
// the checkpoint's run: said, as it reshapes the rest of the schedule.
void say_new_length(FitState& fit, const TensorMap& saved, TensorMap& state, const std::string& name,
                    const OptimizerOptions& options, int64_t total) {
  const std::string key = "lr_total." + name;
  const auto rec = saved.find(key);
  if (rec != saved.end() && rec->second.numel() == 1 && rec->second.item<int64_t>() != total &&
      fit.accel.dist().rank == 0 &&
      (options.scheduler == SchedulerKind::kCosine || options.scheduler == SchedulerKind::kLinear))
    std::printf("resume: optimizer %s's %s schedule now ends at %s %ld (it ended at %ld)\n", name.c_str(),
                choice_name(options.scheduler), choice_name(options.interval), long(total),
                long(rec->second.item<int64_t>()));
  state[key] = torch::tensor(total, torch::kInt64);
}

class LrSchedulerCallback final : public Callback {
 public:
  // The schedules are built here, from the checkpoint's record of the
  // resumed run's (a refused length or plugin schedule: before rank 0 writes
  // anything); the record of this run's is its state.
  std::vector<std::string> state_keys() const override { return {"lr_built.", "lr_total.", "lr_base."}; }
  TensorMap state(FitState&) override { return state_; }
  void load(FitState& fit, const TensorMap& saved) override {
    const ExperimentConfig& cfg = fit.cfg();
    const std::map<std::string, LrLambda> own = plugin_schedules(fit);
    for (const auto& o : fit.model.optimizers()) {
      const OptimizerOptions options = cfg.optimizer(o.name);
      const bool configured = options.scheduler != SchedulerKind::kNone || options.warmup > 0;
      const auto lambda = own.find(o.name);
      const bool lr_changed = lr_built_changed(fit, saved, state_, o);
      if (!configured && lambda == own.end()) {
        if (lr_changed) set_lrs(*o.optimizer, fit.model.built_lrs(o.name));
        continue;
      }
      if (configured && lambda != own.end() && fit.accel.dist().rank == 0)
        std::printf("lr: %s replaces plugin %s's own schedule of optimizer %s\n",
                    cfg.where("optimizers." + o.name + ".scheduler").c_str(), fit.model.plugin_name().c_str(),
                    o.name.c_str());
      const std::string key = "lr_base." + o.name;
      std::vector<double> base = group_lrs(*o.optimizer);
      const auto was = saved.find(key);
      if (lr_changed) {
        base = fit.model.built_lrs(o.name);
      } else if (was != saved.end()) {  // resumed: the schedule's own base, not what load() left
        const auto t = was->second.to(torch::kFloat64).contiguous();
        base.assign(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
      }
      state_[key] = torch::tensor(base, torch::kFloat64);
      if (!configured) {
        const std::string who = "plugin " + fit.model.plugin_name() + ": the lr schedule of optimizer " + o.name;
        schedules_.push_back(
            {o.name, o.optimizer, LrSchedule(lambda->second.factor, lambda->second.per_epoch, base, who)});
        continue;
      }
      const bool epochs = options.interval == ScheduleInterval::kEpoch;
      int64_t total = fit.total_steps;
      if (epochs)
        total = cfg.trainer.max_epochs > 0 ? cfg.trainer.max_epochs
                : fit.total_steps > 0      ? (fit.total_steps + fit.per_epoch - 1) / fit.per_epoch
                                           : -1;
      const std::string where = cfg.where("optimizers." + o.name + ".scheduler") + ": optimizers." + o.name;
      say_new_length(fit, saved, state_, o.name, options, total);
      schedules_.push_back({o.name, o.optimizer, LrSchedule(options, base, total, where)});
    }
  }

  void on_batch_start(FitState& fit) override {
    for (auto& s : schedules_)  // a plugin's factor that throws: PluginSystem names it
      s.schedule.apply(*s.optimizer, s.schedule.per_epoch() ? fit.state.epoch : fit.state.global_step);
  }

  void on_log_step(FitState& fit) override { log(fit); }
  void on_fit_end(FitState& fit) override {
    if (!fit.interval.empty()) log(fit);  // the final row's
  }

 private:
  // The plugin's LrLambdas by optimizer, each naming one of its optimizers once.
  static std::map<std::string, LrLambda> plugin_schedules(FitState& fit) {
    std::map<std::string, LrLambda> out;
    auto given = fit.model.system().configure_schedulers();  // none from a 1.0 plugin
    std::string names;
    for (const auto& o : fit.model.optimizers()) names += (names.empty() ? "" : ", ") + o.name;
    for (auto& l : given) {
      const std::string who = "plugin " + fit.model.plugin_name() + ": configure_schedulers()";
      if (std::none_of(fit.model.optimizers().begin(), fit.model.optimizers().end(),
                       [&](const NamedOptimizer& o) { return o.name == l.optimizer; }))
        throw PluginError(who + " names optimizer '" + l.optimizer + "'; configure_optimizers() returned: " + names);
      if (!l.factor) throw PluginError(who + ": the schedule of optimizer " + l.optimizer + " has no factor");
      if (!out.emplace(l.optimizer, l).second)
        throw PluginError(who + " gives optimizer " + l.optimizer + " two schedules");
    }
    return out;
  }

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
  TensorMap state_;  // lr_built.<name>, lr_base.<name>, lr_total.<name>
};

}  // namespace

std::unique_ptr<Callback> lr_scheduler_callback(CallbackSetup&) { return std::make_unique<LrSchedulerCallback>(); }

}  // namespace gantry
