// The training loop: Lightning's Trainer.fit for one System.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "train/checkpoint.hpp"
#include "config/config.hpp"
#include "config/dist_env.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"
#include "data/idx_dataset.hpp"
#include "plugin/plugin_system.hpp"

namespace gantry {

struct TrainedSystem;
class Callback;

/// A system built from a config: the plugin found and checked, the system
/// constructed from the `system:` keys, every key accounted for.
struct GANTRY_CORE_EXPORT Experiment {
  ExperimentConfig config;
  /// The plugin's system behind its one door (every call into the plugin
  /// goes through it); keeps the plugin loaded while it lives.
  std::shared_ptr<PluginSystem> system;
  /// The data a fit trains and validates on, one kind for the loader: the
  /// system's own (SDK 1.1 train_dataset / val_dataset; `own_data`), set by
  /// build(), or the images data.* names, set by use_images(). `data_name`
  /// names the training data in error lines. val_data may be null.
  std::shared_ptr<const Dataset> train_data, val_data;
  std::string data_name;
  bool own_data = false;

  /// Throws ConfigError / PluginError with one line naming the culprit.
  static Experiment build(const ExperimentConfig& config);
  /// build() on images (what `gantry train` loads from data.*; a test's).
  static Experiment build(const ExperimentConfig& config, const ImageDataset& train,
                          const ImageDataset* val = nullptr);
  /// Trains on `train` (validates on `val`, may be null): images scaled to the
  /// plugin's [low, high]. Throws DataError when their sample shape is not the
  /// plugin's (DataSpec::shape), PluginError when the system brings its own data.
  void use_images(const ImageDataset& train, const ImageDataset* val = nullptr);
  /// The system a checkpoint holds, for inference (`gantry sample`, the
  /// quality score's classifier, serving): built from the checkpoint's own
  /// config, its weights loaded (the EMA weights when the run kept an EMA),
  /// modules in eval mode on `device`. The global generators are left as
  /// they were. Throws CheckpointError / PluginError naming the file.
  /// The plugin: `plugin` when given (a path or a name); else the one the
  /// checkpoint's config names, or, when that path is gone (a moved build
  /// directory), the plugin of the checkpoint's name on the search path.
  static TrainedSystem load_trained(const std::string& checkpoint, torch::Device device,
                                    const std::string& plugin = "");
};

/// What Experiment::load_trained gives.
struct GANTRY_CORE_EXPORT TrainedSystem {
  Experiment experiment;
  std::vector<NamedModule> modules;  ///< in eval mode, on the device asked for
  TrainState saved;                  ///< the checkpoint's step, epoch and extra tensors
  size_t ema_tensors = 0;            ///< tensors taken from the run's EMA (0: its plain weights)
  std::string plugin_note;           ///< "" or a line: the recorded plugin path was gone, which one was used
};

/// What a fit did.
struct FitResult {
  TrainState state;                 ///< where training stopped
  double seconds = 0;               ///< wall time of the loop
  std::vector<std::pair<std::string, double>> last_values;  ///< last logged metrics
  std::string last_checkpoint;      ///< path of the final checkpoint ("" if none)
  int stop_signal = 0;              ///< the signal that stopped it early, or 0
  std::string stop_reason;          ///< what ended it: "trainer.max_steps=1500 reached", "signal 15", ...
  int64_t steps_run = 0;            ///< batches trained by this fit (a resumed run's own, not the total)
  bool replicas_identical = true;   ///< parameters equal on every rank at the end
};

/// Throws PluginError (one line) when this runner cannot give the data kind
/// the plugin's data_spec() asks for.
GANTRY_CORE_EXPORT void check_data_kind(const DataSpec& spec, const std::string& plugin);

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

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gantry
