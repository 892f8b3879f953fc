// Every rank: its status (step, samples/s, memory) at every log step; rank 0
// writes every rank's to ranks.csv and the stream. At the end every rank
// publishes its final status before the end's collectives, so that rank 0's
// ranks.csv holds every rank's final one.
#include "dist/rank_status.hpp"
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class RankStatusCallback final : public Callback {
 public:
  explicit RankStatusCallback(FitState& fit)
      : reporter_(fit.accel.dist().rank, fit.accel.group(), fit.out ? &fit.out->stream() : nullptr, fit.run_dir) {}
  void on_log_step(FitState& fit) override { reporter_.report(fit.state.global_step, fit.batch_size); }
  void on_train_end(FitState& fit) override { reporter_.report(fit.state.global_step, fit.batch_size, false); }
  void on_fit_end(FitState&) override { reporter_.write(); }

 private:
  RankStatusReporter reporter_;
};

}  // namespace

std::unique_ptr<Callback> rank_status_callback(FitState& fit) { return std::make_unique<RankStatusCallback>(fit); }

}  // namespace gantry
