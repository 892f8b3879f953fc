// Rank 0: the progress bar (a terminal) or lines (logs) after every batch.
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

class ProgressCallback final : public Callback {
 public:
  void on_batch_end(FitState& fit) override {
    fit.out->progress().update(fit.state.global_step, fit.state.epoch, fit.state.batch_in_epoch, fit.values);
  }
  void on_fit_end(FitState& fit) override { fit.out->progress().finish(); }
};

}  // namespace

std::unique_ptr<Callback> progress_callback(CallbackSetup& setup) {
  return setup.rank0 ? std::make_unique<ProgressCallback>() : nullptr;
}

}  // namespace gantry
