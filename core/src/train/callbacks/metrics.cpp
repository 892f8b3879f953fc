// Rank 0: a metrics.csv row (kind train) and stream scalars at every log
// step, holding every value logged since the previous row (by training_step
// in those batches, and by log_samples), reduced (the mean unless logged with
// another Reduce); at the end what was logged after the last row joins the
// last step's row; a failed fit (NaN/Inf) keeps the finite values read before it.
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class MetricsCallback final : public Callback {
 public:
  void on_log_step(FitState& fit) override { write(fit); }
  void on_fit_end(FitState& fit) override {
    if (!fit.interval.empty()) write(fit);  // the step's training row, if it has one (merged)
    fit.out->flush();
  }
  // A failed fit (a NaN/Inf metric, a dead rank): what was read before it, finite, is kept.
  void on_exception(FitState& fit, const std::exception&) override {
    if (fit.interval.empty()) return;
    try {
      fit.out->scalars(fit.read_step, fit.state.epoch, "train", fit.interval.reduced());
      fit.interval.clear();
      fit.out->flush();
    } catch (const std::exception&) {  // the failure's own line is the one to see
    }
  }

 private:
  static void write(FitState& fit) {
    if (fit.interval.empty()) return;
    fit.out->scalars(fit.state.global_step, fit.state.epoch, "train", fit.interval.reduced());
    fit.interval.clear();
  }
};

}  // namespace

std::unique_ptr<Callback> metrics_callback() { return std::make_unique<MetricsCallback>(); }

}  // namespace gantry
