// An experiment: a config, the plugin's system built from it, and the data a
// fit trains on. What the trainer, `gantry validate`, `gantry sample` and the
// quality score's classifier start from.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "config/config.hpp"
#include "data/idx_dataset.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"
#include "plugin/plugin_system.hpp"
#include "checkpoint/file.hpp"

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
  /// The checkpoint config.trainer.resume names, when the caller has read it
  /// already (train's resolution): the model restores from it without a
  /// second read, then drops it. Null: the model reads config.trainer.resume.
  std::shared_ptr<const CheckpointFile> resume_file;

  /// Throws ConfigError / PluginError with one line naming the culprit.
  static Experiment build(const ExperimentConfig& config);
  /// build() on images (what `gantry train` loads from data.*; a test's).
  static Experiment build(const ExperimentConfig& config, const ImageDataset& train, const ImageDataset* val = nullptr);
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
  /// `file`: read once (checkpoint/resolve.hpp's resolution, or CheckpointFile::read).
  static TrainedSystem load_trained(const CheckpointFile& file, torch::Device device, const std::string& plugin = "");
  /// load_trained(*CheckpointFile::read(checkpoint), ...).
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

/// Throws PluginError (one line) when this runner cannot give the data kind
/// the plugin's data_spec() asks for.
GANTRY_CORE_EXPORT void check_data_kind(const DataSpec& spec, const std::string& plugin);

}  // namespace gantry
