// Rank 0: the logged values as a metrics.csv row and stream scalars at every
// log step, and once more at the end when the last batch was not a log step.
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class MetricsCallback final : public Callback {
 public:
  void on_log_step(FitState& fit) override {
    fit.out->scalars(fit.state.global_step, fit.state.epoch, fit.values);
    last_row_step_ = fit.state.global_step;
  }
  void on_checkpoint_step(FitState& fit) override { fit.out->flush_metrics(); }
  void on_fit_end(FitState& fit) override {
    if (last_row_step_ != fit.state.global_step && !fit.values.empty())
      fit.out->scalars(fit.state.global_step, fit.state.epoch, fit.values);
    fit.out->flush_metrics();
  }

 private:
  int64_t last_row_step_ = -1;
};

}  // namespace

std::unique_ptr<Callback> metrics_callback() { return std::make_unique<MetricsCallback>(); }

}  // namespace gantry
