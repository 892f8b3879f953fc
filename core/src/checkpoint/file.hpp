// Checkpoints: one file per save, in PyTorch's zip/pickle format, so that
// Python's torch.load() reads it. Top-level dict (Lightning's layout):
//   "state_dict"        {"<module>.<param or buffer>": Tensor}
//   "optimizer_states"  {"<optimizer>": uint8 Tensor, LibTorch's archive bytes}
//   "rng_states"        {"torch_cpu": uint8 Tensor (rank 0), "torch_cpu_rank<r>": rank r's}
//   "trainer_state"     {"<key>": Tensor}: the trainer's own (lr_base.<optimizer>, ...)
//   "global_step", "epoch", "batch_in_epoch", "world_size": int
//   "config": str (the resolved YAML), "plugin", "plugin_version",
//   "gantry_version", "format_version"
//   "checksum": "crc32:<hex>" over all of the above (keys sorted, tensor bytes)
// Written atomically (temp file, fsync, rename, fsync of the directory). A
// truncated file fails to parse; a corrupted one fails its checksum.
// The names of the files in a run's checkpoints/ are checkpoint/names.hpp's;
// which file a path, run or experiment directory means, checkpoint/resolve.hpp's.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "gantry/system.hpp"

namespace gantry {

/// Where training stands: what a checkpoint restores besides tensors.
struct TrainState {
  TrainState() = default;
  TrainState(int64_t step, int64_t epoch_, int64_t batch, std::map<std::string, torch::Tensor> extra_ = {})
      : global_step(step), epoch(epoch_), batch_in_epoch(batch), extra(std::move(extra_)) {}

  int64_t global_step = 0;     ///< batches trained
  int64_t epoch = 0;           ///< current epoch
  int64_t batch_in_epoch = 0;  ///< batches of `epoch` already trained
  /// The trainer's own state besides modules and optimizers (schedulers'
  /// base lrs, ...), by key; "trainer_state" in the file (absent before 0.2).
  std::map<std::string, torch::Tensor> extra;
};

struct CheckpointMeta {
  std::string plugin;  ///< manifest name
  std::string plugin_version;
  std::string config_yaml;  ///< resolved config
  int64_t global_step = 0;  ///< (read) the step it was saved at
  int64_t world_size = 0;   ///< (read) the ranks that trained it; 0: not recorded
};

/// The default generator's state of `device` (the CPU's, or a GPU's), and
/// setting it back: what checkpoints save and a quality score puts back.
/// A tensor's shape as LibTorch prints it: "[64, 1, 28, 28]".
GANTRY_CORE_EXPORT std::string shape_str(const torch::Tensor& t);
GANTRY_CORE_EXPORT torch::Tensor generator_state(torch::Device device);
GANTRY_CORE_EXPORT void set_generator_state(torch::Device device, const torch::Tensor& state);

/// Restores the global CPU generator's state (and `device`'s, when a GPU)
/// on destruction: a quality score, or building
/// a system to load into, draws from them without moving the training's
/// random stream.
class GANTRY_CORE_EXPORT GlobalRngGuard {
 public:
  explicit GlobalRngGuard(torch::Device device);
  ~GlobalRngGuard();
  GlobalRngGuard(const GlobalRngGuard&) = delete;
  GlobalRngGuard& operator=(const GlobalRngGuard&) = delete;

 private:
  torch::Device device_;
  torch::Tensor cpu_, device_state_;
};

/// Saves modules, optimizers, RNG and `state` to `path` atomically.
/// `rng_states`: every rank's CPU generator state, by rank; empty: this
/// process's only (saved as rank 0's). `cuda_rng_states`: every rank's CUDA
/// generator state (of its own GPU), by rank; empty on the CPU. Tensors are
/// saved on the CPU, so a checkpoint written on a GPU loads anywhere.
GANTRY_CORE_EXPORT void save_checkpoint(const std::string& path, const std::vector<NamedModule>& modules,
                                        const std::vector<NamedOptimizer>& optimizers, const TrainState& state,
                                        const CheckpointMeta& meta, const std::vector<torch::Tensor>& rng_states = {},
                                        const std::vector<torch::Tensor>& cuda_rng_states = {});

/// One checkpoint file, read, unpickled and verified once: its metadata
/// (to find the plugin and config before building the system) and what it
/// restores, with no second read (inference, a resume, serving). Holds the
/// file's tensors while it lives: drop it once loaded.
class GANTRY_CORE_EXPORT CheckpointFile {
 public:
  /// Reads `path` whole and verifies its checksum. Throws CheckpointError
  /// naming the file when it is unreadable, truncated, corrupt or not a
  /// gantry checkpoint.
  static std::shared_ptr<const CheckpointFile> read(const std::string& path);

  const std::string& path() const { return path_; }  ///< as it was read
  const CheckpointMeta& meta() const { return meta_; }
  /// The step, epoch and trainer state (extra tensors) without loading
  /// anything: what a resolution prints (the best value of a best.ckpt).
  TrainState train_state() const;
  /// Restores into `modules` (exactly: every parameter and buffer must be in
  /// the file with the same shape; nothing changes when one does not fit) and
  /// `optimizers` (those named in the file; may be empty, e.g. for sampling),
  /// rank `rank`'s CPU RNG when `restore_rng` (and its CUDA RNG when `device`
  /// is a GPU and the file has one: a checkpoint from the CPU leaves the CUDA
  /// generator as seeded), and returns the train state. Optimizer state lands
  /// on `device` (torch.load's map_location). `plugin`: the loaded plugin's
  /// name, checked against the file's.
  TrainState load(const std::string& plugin, const std::vector<NamedModule>& modules,
                  const std::vector<NamedOptimizer>& optimizers, bool restore_rng, int rank = 0,
                  torch::Device device = torch::kCPU) const;

  CheckpointFile(std::string path, c10::impl::GenericDict dict);  ///< read() makes it

 private:
  std::string path_;
  c10::impl::GenericDict dict_;
  CheckpointMeta meta_;
};

/// PBT's exploit: `to` becomes a copy of checkpoint `from` (weights,
/// optimizer and trainer state, step and config, all as they are) whose
/// random streams are new: every rank's CPU generator seeded from `seed`
/// (seed + rank), its CUDA ones dropped (they start as trainer.seed seeds
/// them), so the copy does not draw the noise its source draws. Verified as
/// read, written atomically; the same `from` and `seed` give the same file.
GANTRY_CORE_EXPORT void fork_checkpoint(const std::string& from, const std::string& to, uint64_t seed);

/// CheckpointFile::read(path)->meta().
GANTRY_CORE_EXPORT CheckpointMeta read_checkpoint_meta(const std::string& path);

/// CheckpointFile::read(path)->load(...): one read. `meta`: also the file's
/// metadata (its config), from the same read.
GANTRY_CORE_EXPORT TrainState load_checkpoint(const std::string& path, const std::string& plugin,
                                              const std::vector<NamedModule>& modules,
                                              const std::vector<NamedOptimizer>& optimizers, bool restore_rng,
                                              int rank = 0, torch::Device device = torch::kCPU,
                                              CheckpointMeta* meta = nullptr);

}  // namespace gantry
