// Rank 0: a metrics.csv row and stream scalars at every log step, holding
// every value logged since the previous row, reduced (the mean unless logged
// with another Reduce) (by training_step in
// those batches, and by log_samples), and a last row at the end for what was
// logged after the last one.
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class MetricsCallback final : public Callback {
 public:
  void on_log_step(FitState& fit) override { write(fit); }
  void on_checkpoint_step(FitState& fit) override { fit.out->flush_metrics(); }
  void on_fit_end(FitState& fit) override {
    if (!fit.interval.empty()) write(fit);
    fit.out->flush_metrics();
  }

 private:
  static void write(FitState& fit) {
    if (fit.interval.empty()) return;
    fit.out->scalars(fit.state.global_step, fit.state.epoch, fit.interval.reduced());
    fit.interval.clear();
  }
};

}  // namespace

std::unique_ptr<Callback> metrics_callback() { return std::make_unique<MetricsCallback>(); }

}  // namespace gantry
