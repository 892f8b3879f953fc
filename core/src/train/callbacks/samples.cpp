// Rank 0: the plugin's log_samples (modules in eval mode, no grad) before any
// training, every trainer.image_every_n_steps, and after the last batch.
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class SamplesCallback final : public Callback {
 public:
  void on_fit_start(FitState& fit) override {
    if (fit.state.global_step == 0) fit.model.log_samples(fit.state);  // the grid before any training
    last_image_step_ = fit.state.global_step;
  }
  void on_image_step(FitState& fit) override {
    fit.model.log_samples(fit.state);
    last_image_step_ = fit.state.global_step;
  }
  void on_fit_end(FitState& fit) override {
    if (last_image_step_ != fit.state.global_step) fit.model.log_samples(fit.state);
  }

 private:
  int64_t last_image_step_ = 0;
};

}  // namespace

std::unique_ptr<Callback> samples_callback() { return std::make_unique<SamplesCallback>(); }

}  // namespace gantry
