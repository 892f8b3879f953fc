// The training loop: Lightning's Trainer.fit for one System.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/dist_env.hpp"
#include "gantry/core_export.hpp"
#include "checkpoint/file.hpp"
#include "train/experiment.hpp"

namespace gantry {

/// What a fit did.
struct FitResult {
  TrainState state;                                         ///< where training stopped
  double seconds = 0;                                       ///< wall time of the loop
  std::vector<std::pair<std::string, double>> last_values;  ///< last logged metrics
  std::string last_checkpoint;                              ///< path of the final checkpoint ("" if none)
  int64_t last_checkpoint_step = -1;                        ///< the newest step_*.ckpt's step (-1: none written)
  int stop_signal = 0;                                      ///< the signal that stopped it early, or 0
  std::string stop_reason;  ///< what ended it: "trainer.max_steps=1500 reached", "signal 15", ...
  bool paused = false;      ///< it stopped at trainer.pause_at_step (a checkpoint there; a resume goes on)
  int64_t steps_run = 0;    ///< batches trained by this fit (a resumed run's own, not the total)
  /// This rank's calls into the plugin by hook (PluginSystem::hook_times),
  /// and "(checkpoint writes)": write_checkpoint's.
  std::map<std::string, HookTime> hook_times;
};

/// Every check `gantry train` makes of the system before step 1 that needs no
/// data, no peers and writes nothing: modules() and configure_optimizers()
/// (an optimizers.<name> section for an optimizer the plugin lacks, a
/// parameter an optimizer trains that no module owns), ema.modules, the
/// resume checkpoint's fit. What `gantry validate` runs; throws the error
/// train would.
GANTRY_CORE_EXPORT void check_before_training(Experiment experiment);

class GANTRY_CORE_EXPORT Trainer {
 public:
  /// `run_dir` receives metrics.csv, images/ and checkpoints/ (rank 0 only;
  /// other ranks may pass ""). With `dist.world_size` > 1 the constructor joins
  /// the process group (rendezvous) and broadcasts rank 0's parameters.
  Trainer(Experiment experiment, std::string run_dir, DistEnv dist = {});
  ~Trainer();

  /// Trains on the experiment's train_data until max_epochs / max_steps /
  /// max_time or a stop signal; validates on its val_data (may be null) every
  /// trainer.val_every_n_epochs. Throws TrainingError (NaN/Inf metric, a
  /// throwing training_step) after saving what can be saved.
  FitResult fit();
  /// Adds a callback (train/callback.hpp) to the next fit, at
  /// CallbackSlot::kUser: after the built-in ones that write rows, before the
  /// checkpoint. Tests record the loop's points with it.
  void add_callback(std::unique_ptr<Callback> callback);
  /// A resume's config changes against its checkpoint's (train/resume.hpp):
  /// what the constructor found, refused nothing of, and said on rank 0.
  const std::vector<ConfigChange>& resume_changes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
