// Every rank (each rank's RNG state is gathered into the file): a checkpoint
// every checkpoint.every_n_steps and checkpoint.every_n_minutes (the loop
// agrees on the batch), between epochs (checkpoint.every_n_epochs) and at the end (checkpoint.save_last); rank
// 0 writes it atomically, streams a "checkpoint" event (path relative to the
// run directory) and keeps the newest checkpoint.keep_last. The best ones by
// a metric (checkpoint.monitor) are written by the monitored-metric callback
// with the same write_checkpoint.
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "checkpoint/names.hpp"
#include "train/callback.hpp"
#include "train/model.hpp"
#include "train/run_outputs.hpp"

namespace fs = std::filesystem;

namespace gantry {

std::string write_checkpoint(FitState& fit, const std::string& file_name) {
  const auto start = std::chrono::steady_clock::now();
  struct Timed {
    HookTime& into;
    std::chrono::steady_clock::time_point start;
    ~Timed() {
      ++into.calls;
      into.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } timed{fit.checkpoint_writes, start};
  const std::vector<torch::Tensor> rng = fit.accel.gather_rng_states();
  const std::vector<torch::Tensor> cuda_rng = fit.accel.gather_cuda_rng_states();
  // Every callback's state (every rank alike: the accumulated gradients' is a collective).
  if (fit.callbacks) fit.callbacks->save_state(fit, fit.state.extra);
  if (!fit.out) return "";
  for (auto& [key, t] : fit.model.plugin_state(fit.state.global_step))
    fit.state.extra[key] = t;                                      // the plugin's extra_state() (ABI 1.1)
  if (!fit.interval_kept) fit.interval.to_state(fit.state.extra);  // logged since the last row: a resume's next row
  fit.out->flush_metrics(fit.state);  // metrics.csv's rows on disk, its column order in the state
  const std::string path = (fs::path(fit.run_dir) / ckpt::kFolder / file_name).string();
  const auto& manifest = fit.model.system().manifest();
  save_checkpoint(path, fit.model.modules(), fit.model.optimizers(), fit.state,
                  {manifest.name, manifest.version, fit.cfg().to_yaml(), 0}, rng, cuda_rng);
  fit.out->event("checkpoint", fit.state.global_step, (fs::path(ckpt::kFolder) / file_name).string());
  return path;
}

namespace {

class CheckpointCallback final : public Callback {
 public:
  void on_checkpoint_step(FitState& fit) override { save(fit, false); }
  void on_fit_end(FitState& fit) override { save(fit, true); }
  void on_batch_end(FitState&) override { ran_ = true; }
  // checkpoint.every_n_epochs: the state between two epochs (the next one at
  // its batch 0, the last one's validation and rows done: a resume redoes
  // nothing), before the next epoch's first batch trains. Every rank alike.
  void on_batch_start(FitState& fit) override {
    const int64_t n = fit.cfg().checkpoint.every_n_epochs;
    const TrainState& s = fit.state;
    if (n <= 0 || !ran_ || s.batch_in_epoch != 0 || s.epoch % n != 0) return;
    if (fit.last_checkpoint_step == s.global_step) return;  // this step's is written
    save(fit, false);
  }

 private:
  bool ran_ = false;  // a batch ran in this fit (a resume at an epoch's start has its checkpoint)

  static void save(FitState& fit, bool final) {
    if (!fit.cfg().checkpoint.save_last) return;                             // the best ones only (checkpoint.monitor)
    if (final && fit.last_checkpoint_step == fit.state.global_step) return;  // every rank alike: no collective
    const std::string path = write_checkpoint(fit, ckpt::step_file(fit.state.global_step));
    fit.last_checkpoint_step = fit.state.global_step;
    fit.last_checkpoint_time = std::chrono::steady_clock::now();  // checkpoint.every_n_minutes counts from here
    if (!fit.out) return;
    fit.last_checkpoint = path;
    ckpt::prune_steps((fs::path(fit.run_dir) / ckpt::kFolder).string(), fit.cfg().checkpoint.keep_last);
  }
};

}  // namespace

std::unique_ptr<Callback> checkpoint_callback(CallbackSetup&) { return std::make_unique<CheckpointCallback>(); }

}  // namespace gantry
