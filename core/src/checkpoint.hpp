// Checkpoints: one file per save, in PyTorch's zip/pickle format, so that
// Python's torch.load() reads it. Top-level dict (Lightning's layout):
//   "state_dict"        {"<module>.<param or buffer>": Tensor}
//   "optimizer_states"  {"<optimizer>": uint8 Tensor, LibTorch's archive bytes}
//   "rng_states"        {"torch_cpu": uint8 Tensor}
//   "global_step", "epoch", "batch_in_epoch": int
//   "config": str (the resolved YAML), "plugin", "plugin_version",
//   "gantry_version", "format_version"
// Written atomically (temp file, fsync, rename, fsync of the directory).
#pragma once

#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "gantry/system.hpp"

namespace gantry {

/// Where training stands: what a checkpoint restores besides tensors.
struct TrainState {
  int64_t global_step = 0;     ///< batches trained
  int64_t epoch = 0;           ///< current epoch
  int64_t batch_in_epoch = 0;  ///< batches of `epoch` already trained
};

struct CheckpointMeta {
  std::string plugin;          ///< manifest name
  std::string plugin_version;
  std::string config_yaml;     ///< resolved config
};

/// Saves modules, optimizers, RNG and `state` to `path` atomically.
GANTRY_CORE_EXPORT void save_checkpoint(const std::string& path,
                                        const std::vector<NamedModule>& modules,
                                        const std::vector<NamedOptimizer>& optimizers,
                                        const TrainState& state, const CheckpointMeta& meta);

/// Reads only the metadata (to find the plugin and config before building the
/// system). Throws CheckpointError naming the file when it is unreadable.
GANTRY_CORE_EXPORT CheckpointMeta read_checkpoint_meta(const std::string& path);

/// Restores into `modules` (exactly: every parameter and buffer must be in the
/// file with the same shape) and `optimizers` (those named in the file; may be
/// empty, e.g. for sampling), the CPU RNG when `restore_rng`, and returns the
/// train state. `plugin`: the loaded plugin's name, checked against the file's.
GANTRY_CORE_EXPORT TrainState load_checkpoint(const std::string& path, const std::string& plugin,
                                              const std::vector<NamedModule>& modules,
                                              const std::vector<NamedOptimizer>& optimizers,
                                              bool restore_rng);

}  // namespace gantry
