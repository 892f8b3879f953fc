// Every rank, in a world of more than one: data parallelism keeps every
// replica bit-identical, so replicas that differ are a bug (a training_step
// that steps an optimizer by hand skips the gradient average). Checked before
// every checkpoint (which saves rank 0's copy as the run's) and every
// trainer.check_replicas_every_n_steps; the first divergence fails the run on
// every rank, naming the step and the modules, before anything is saved.
#include <map>

#include "gantry/errors.hpp"
#include "train/callback.hpp"

namespace gantry {

namespace {

class ReplicasCallback final : public Callback {
 public:
  void on_batch_end(FitState& fit) override {
    const int64_t n = fit.cfg().trainer.check_replicas_every_n_steps;
    if (n > 0 && fit.state.global_step % n == 0) check(fit);
  }
  void on_checkpoint_step(FitState& fit) override { check(fit); }
  void on_fit_end(FitState& fit) override { check(fit); }

 private:
  void check(FitState& fit) {
    if (checked_at_ == fit.state.global_step) return;  // nothing trained since
    checked_at_ = fit.state.global_step;
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    for (const auto& m : fit.model.modules())
      for (const auto& p : m.module->named_parameters()) {
        names.push_back(m.name + "." + p.key());
        params.push_back(p.value().detach());
      }
    const std::vector<size_t> bad = fit.accel.differing(params);
    if (bad.empty()) return;
    // By module: "g (3 of 8 parameters: fc1.weight, ...)".
    std::map<std::string, std::vector<std::string>> by_module;
    for (const size_t i : bad) {
      const size_t dot = names[i].find('.');
      by_module[names[i].substr(0, dot)].push_back(names[i].substr(dot + 1));
    }
    std::string where;
    for (const auto& [module, list] : by_module) {
      std::string shown;
      for (size_t i = 0; i < list.size() && i < 3; ++i) shown += (i ? ", " : "") + list[i];
      if (list.size() > 3) shown += ", ...";
      where += (where.empty() ? "" : "; ") + std::string("module ") + module + " (" + std::to_string(list.size()) +
               (list.size() == 1 ? " parameter: " : " parameters: ") + shown + ")";
    }
    throw TrainingError(
        "the parameters differ across the " + std::to_string(fit.accel.dist().world_size) + " ranks at step " +
        std::to_string(fit.state.global_step) + ", in " + where +
        ": a gradient was not averaged (a training_step that calls backward() and step() itself skips DDP's "
        "all-reduce: use ctx.optimize, or ctx.backward and ctx.step); nothing was saved at this step" +
        (fit.last_checkpoint.empty()
             ? std::string()
             : " (the last checkpoint, " + fit.last_checkpoint + ", holds identical replicas)"));
  }
  int64_t checked_at_ = -1;
};

}  // namespace

std::unique_ptr<Callback> replicas_callback(CallbackSetup& setup) {
  return setup.fit.accel.dist().world_size > 1 ? std::make_unique<ReplicasCallback>() : nullptr;
}

}  // namespace gantry
