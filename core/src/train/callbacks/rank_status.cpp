// Every rank: its status (step, samples/s, memory, CPU, where its time went
// per step, its GPU) at every log step; rank 0 flags stragglers and writes
// every rank's to ranks.csv, TensorBoard and the stream. At the end every
// rank publishes its final status before the end's collectives, so that rank
// 0's ranks.csv holds every rank's final one; rank 0 prints the stragglers.
#include <cstdio>

#include "distributed/gpu_probe.hpp"
#include "distributed/rank_status.hpp"
#include "train/callback.hpp"
#include "train/run_outputs.hpp"

namespace gantry {

namespace {

std::unique_ptr<GpuProbe> open_gpu(const Accelerator& accel) {
  const std::string bus = accel.gpu_bus_id();
  if (bus.empty()) return nullptr;
  std::string why;
  auto probe = GpuProbe::open(bus, why);
  if (!probe && accel.is_zero())
    std::printf("ranks: no GPU utilisation, memory or power in the rank status: %s\n", why.c_str());
  return probe;
}

StepParts parts_of(const Profile& p) {
  StepParts s;
  s.data = p.seconds(Profile::kData);
  s.training_step = p.seconds(Profile::kTrainingStep);
  s.next_batch = p.seconds(Profile::kNextBatch);
  s.all_reduce = p.seconds(Profile::kAllReduce);
  s.optimizer = p.seconds(Profile::kOptimizer);
  s.sync = p.seconds(Profile::kSync);
  return s;
}

class RankStatusCallback final : public Callback {
 public:
  explicit RankStatusCallback(FitState& fit) : gpu_(open_gpu(fit.accel)) {}
  // Rank 0's stream exists from here (the callbacks are built before rank 0 opens its files).
  void on_fit_start(FitState& fit) override {
    reporter_ = std::make_unique<RankStatusReporter>(
        fit.accel.dist().rank, fit.accel.group(), fit.out ? &fit.out->stream() : nullptr, fit.run_dir, gpu_.get(),
        fit.cfg().trainer.straggler_factor, fit.cfg().trainer.straggler_intervals);
  }
  void on_log_step(FitState& fit) override { report(fit, true); }
  void on_train_end(FitState& fit) override { report(fit, false); }
  void on_fit_end(FitState& fit) override {
    reporter_->write();
    const std::string stragglers = reporter_->straggler_summary();
    if (!stragglers.empty()) std::printf("stragglers: %s\n", stragglers.c_str());
  }

 private:
  void report(FitState& fit, bool write) {
    const StepParts parts = fit.profile ? parts_of(*fit.profile) : StepParts{};
    reporter_->report(fit.state.global_step, fit.batch_size, fit.profile ? &parts : nullptr, write);
  }
  std::unique_ptr<GpuProbe> gpu_;
  std::unique_ptr<RankStatusReporter> reporter_;
};

}  // namespace

std::unique_ptr<Callback> rank_status_callback(CallbackSetup& setup) {
  return std::make_unique<RankStatusCallback>(setup.fit);
}

}  // namespace gantry
