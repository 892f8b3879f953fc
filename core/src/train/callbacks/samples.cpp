// Rank 0: the plugin's log_samples (modules in eval mode, no grad) before any
// training, every trainer.image_every_n_steps, and after the last batch; what
// it logs with ctx.log joins the metrics row of that step.
#include "train/callback.hpp"
#include "optim/ema.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class SamplesCallback final : public Callback {
 public:
  void on_fit_start(FitState& fit) override {
    if (fit.state.global_step == 0) log_samples(fit);  // the grid before any training
    last_image_step_ = fit.state.global_step;
  }
  void on_image_step(FitState& fit) override {
    log_samples(fit);
    last_image_step_ = fit.state.global_step;
  }
  void on_fit_end(FitState& fit) override {
    if (last_image_step_ != fit.state.global_step) log_samples(fit);
  }

 private:
  // What log_samples logs goes into the next metrics row (rank 0 alone runs
  // it, so sync is not applied).
  static void log_samples(FitState& fit) {
    const EmaWeights::Swapped ema(fit.ema);  // drawn with the EMA weights (ema.decay)
    for (const auto& v : fit.model.log_samples(fit.state)) fit.interval.add(v.name, v.value.item<double>(), v.reduce);
  }

  int64_t last_image_step_ = 0;
};

}  // namespace

std::unique_ptr<Callback> samples_callback(CallbackSetup& setup) {
  return setup.rank0 ? std::make_unique<SamplesCallback>() : nullptr;
}

}  // namespace gantry
