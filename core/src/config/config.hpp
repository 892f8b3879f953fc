// Experiment configs: YAML file + `key=value` overrides -> validated option
// structs. YAML keys are the option names one-to-one (`trainer.max_steps` is
// TrainerOptions::max_steps). Every error names the key, where it was set
// (file:line or the command-line override) and what was expected.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "gantry/core_export.hpp"
#include "gantry/params.hpp"

namespace gantry {

struct GANTRY_CORE_EXPORT TrainerOptions {
  int64_t max_epochs = 1;            ///< -1: no epoch limit; when not given but max_steps or max_time is: -1
  int64_t max_steps = -1;            ///< batches; -1: no step limit
  std::string max_time;              ///< "DD:HH:MM:SS", "HH:MM:SS" or seconds; empty: none
  int64_t seed = 42;                 ///< seeds LibTorch's generator and the data shuffle
  int64_t log_every_n_steps = 50;    ///< a metrics.csv row every n batches
  int64_t image_every_n_steps = 500; ///< System::log_samples every n batches (0: start and end only)
  int64_t val_every_n_epochs = 0;    ///< validation_step over the test split; 0: never
  std::string accelerator = "cpu";   ///< cpu | cuda | auto
  int64_t devices = 1;               ///< processes (devices) per node
  int64_t num_nodes = 1;             ///< nodes
  int64_t threads = 0;               ///< intra-op threads per rank; 0: the cores available to it
  std::string out_dir = "runs";      ///< run directories go to <out_dir>/<name>/<timestamp>
  std::string progress = "auto";     ///< auto | bar | lines | none
  std::string resume;                ///< "auto" (newest valid checkpoint of the experiment), a path, or empty
  double dist_timeout = 300;         ///< seconds a rank waits for the others (rendezvous, collectives)
  std::string broadcast_buffers = "on_read";  ///< on_read | every_step: when rank 0's buffers (BatchNorm stats) are broadcast
  std::string grad_compression = "none";  ///< none | fp16: all-reduce gradients as fp16 (DDP's fp16_compress_hook)
  std::string grad_transport = "auto";  ///< auto | gloo | shm: how gradients are averaged (shm: every rank on one host)
  bool fused_adam = true;            ///< step torch::optim::Adam with gantry's one-pass kernel (same math and state)
  bool step_in_backward = true;      ///< with the fused Adam in a world of one: step each parameter as backward produces its gradient
  bool huge_pages = true;             ///< ask for transparent huge pages for the heap (gantry train, when the kernel offers them on request)
  std::string weight_layout = "auto";  ///< auto | as_built: auto keeps Linear weights whose rows are a multiple of 4 KiB transposed in memory
  double gradient_clip_val = 0;      ///< clip every optimizer's gradients (after the DDP average); 0: never
  std::string gradient_clip_algorithm = "norm";  ///< norm | value
  std::string read_metrics = "auto";  ///< auto | every_step | on_log: when logged values are read to the host (auto: on_log on a GPU)
  std::string precision = "32";      ///< 32 | bf16-mixed: autocast to bfloat16 for the plugin's hooks (train/precision.hpp)
  bool cuda_graphs = false;          ///< capture the training step as a CUDA graph once and replay it (docs/cuda.md)

  double max_time_seconds() const;   ///< max_time parsed; <= 0 when unset
};

struct DataOptions {
  std::string format = "idx";          ///< idx | image_folder | cifar10 (data/load_images.hpp)
  std::string path = "/usr/share/datasets/fashion-mnist";  ///< the folder holding the data
  std::string train_prefix = "train";  ///< idx: <prefix>-images-idx3-ubyte[.gz]; image_folder: train/
                                       ///< (else path itself); cifar10: data_batch[_n].bin
  std::string val_prefix = "t10k";     ///< validation split, same naming (image_folder: val/, cifar10: test_batch)
  int64_t batch_size = 64;             ///< per rank
  bool shuffle = true;                 ///< reshuffle each epoch from seed + epoch
  bool drop_last = false;              ///< drop the last incomplete batch
  int64_t prefetch = 2;                ///< batches prepared ahead on a worker thread
};

struct CheckpointOptions {
  int64_t every_n_steps = 0;  ///< also save every n batches; 0: only at the end
  int64_t keep_last = 0;      ///< keep only the newest n checkpoints of a run; 0: all
};

/// The `slurm:` section, for `gantry submit` (nodes and tasks come from
/// trainer.num_nodes and trainer.devices).
struct SlurmOptions {
  std::string partition;                  ///< --partition; empty: the cluster's default
  std::string time = "01:00:00";          ///< --time
  std::string mem;                        ///< --mem per node, e.g. "32G"; empty: default
  int64_t cpus_per_task = 0;              ///< --cpus-per-task; 0: trainer.threads, else 1
  std::string account;                    ///< --account; empty: none
  std::string signal = "USR1@90";         ///< --signal: the step's tasks get it before the time limit
  std::string template_path = "slurm/train.sbatch";  ///< the sbatch template (`slurm.template`)
  int64_t array_parallel = 0;             ///< `gantry submit --sweep`: at most this many points at once (--array's %N); 0: no limit
};

/// The `monitor:` section: the live stream served by rank 0 (docs/protocol.md).
struct MonitorOptions {
  bool enabled = true;
  std::string host = "127.0.0.1";  ///< listen address; reach a cluster node with ssh -L
  int64_t port = 0;                ///< 0: a free port
  std::string token;               ///< empty: a random one per run
};

/// The `ema:` section: an exponential moving average of module weights,
/// updated after every batch, checkpointed, and used for the sample grids and
/// `gantry sample`.
struct EmaOptions {
  double decay = 0;     ///< 0: off; else shadow = decay * shadow + (1 - decay) * weight after each batch
  std::string modules;  ///< comma-separated module names (modules() names); empty: every module
};

/// The `metrics:` section: the sample-quality score (train/callbacks/quality.cpp,
/// docs/quality.md): the Frechet distance between the features of generated
/// samples and of the real validation split, under a frozen classifier.
struct MetricsOptions {
  int64_t quality_every_n_steps = 0;  ///< score every n batches (and before the first and after the last); 0: never
  std::string quality_classifier;     ///< a classifier checkpoint, run or experiment directory (its newest checkpoint)
  int64_t quality_samples = 10000;    ///< K generated samples per score (split among the ranks)
  int64_t quality_batch_size = 500;   ///< samples generated and embedded at once
  int64_t quality_seed = 0;           ///< the generator inputs' seed: the same K samples' inputs every time
};

/// `optimizers.<name>.*`: what the trainer does around one optimizer's step
/// (`<name>` as configure_optimizers() names it). trainer.gradient_clip_* are
/// the defaults for every optimizer, as in Lightning.
struct OptimizerOptions {
  double gradient_clip_val = 0;                 ///< 0: no clipping
  std::string gradient_clip_algorithm = "norm"; ///< norm (total 2-norm of the optimizer's gradients) | value
  std::string scheduler = "none";               ///< none | step | cosine | linear: the lr over the run
  std::string interval = "step";                ///< step | epoch: what the scheduler counts
  int64_t warmup = 0;                           ///< intervals of linear warm-up from lr/warmup to lr
  int64_t step_size = 1;                        ///< step: multiply by gamma every step_size intervals
  double gamma = 0.1;                           ///< step: the factor
  double min_lr = 0;                            ///< cosine, linear: the lr at the end of the run
};

/// The `system:` section: the plugin and its own keys.
struct SystemOptions {
  std::string plugin = "gan";  ///< plugin name (searched) or path to a .so
};

/// A resolved, validated experiment.
struct GANTRY_CORE_EXPORT ExperimentConfig {
  std::string name = "experiment";
  SystemOptions system;
  DataOptions data;
  TrainerOptions trainer;
  CheckpointOptions checkpoint;
  SlurmOptions slurm;
  MonitorOptions monitor;
  EmaOptions ema;
  MetricsOptions metrics;
  std::map<std::string, OptimizerOptions> optimizers;  ///< by optimizer name; see optimizer()

  /// The options of optimizer `name`: its `optimizers.<name>` section over
  /// the trainer-wide defaults.
  OptimizerOptions optimizer(const std::string& name) const;

  std::string source;              ///< the file it came from ("" when built in code)
  YAML::Node system_params;        ///< system section minus `plugin`
  std::map<std::string, std::string> origins;  ///< full key -> "file:line" / "command line 'k=v'"

  /// Loads `path`, applies `overrides` ("trainer.max_steps=10") and validates
  /// everything but the plugin's own keys (see SystemParams). Throws ConfigError.
  static ExperimentConfig load(const std::string& path, const std::vector<std::string>& overrides = {});
  /// Parses YAML text (from a checkpoint); `source` names it in errors.
  static ExperimentConfig parse(const std::string& yaml_text, const std::string& source,
                                const std::vector<std::string>& overrides = {});
  /// The resolved config as YAML: every option with its value, defaults included.
  std::string to_yaml() const;
  /// Where `key` was set, for messages ("configs/x.yaml:12").
  std::string where(const std::string& key) const;
};

/// gantry::Params over the `system:` section, recording which keys the plugin
/// asked for so that the rest can be reported as unknown.
class GANTRY_CORE_EXPORT SystemParams : public Params {
 public:
  explicit SystemParams(const ExperimentConfig& cfg);

  bool has(const std::string& key) const override;
  double get_double(const std::string& key) const override;
  int64_t get_int(const std::string& key) const override;
  bool get_bool(const std::string& key) const override;
  std::string get_string(const std::string& key) const override;
  std::vector<double> get_double_list(const std::string& key) const override;
  std::vector<int64_t> get_int_list(const std::string& key) const override;

  /// Throws ConfigError for the first key set in the config that the plugin
  /// `plugin_name` never asked for, with the nearest key it did ask for.
  void check_all_used(const std::string& plugin_name) const;

 private:
  const YAML::Node& require(const std::string& key, const char* expected) const;
  [[noreturn]] void type_error(const std::string& key, const char* expected) const;

  const ExperimentConfig& cfg_;
  std::map<std::string, YAML::Node> values_;  // flattened: "a.b" -> scalar or list
  mutable std::set<std::string> asked_;
};

/// The nearest of `candidates` to `word` (edit distance), or "" when none is close.
GANTRY_CORE_EXPORT std::string nearest_key(const std::string& word,
                                           const std::vector<std::string>& candidates);

}  // namespace gantry
