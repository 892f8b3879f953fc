// Experiment configs: YAML file + `key=value` overrides -> validated option
// structs. YAML keys are the option names one-to-one (`trainer.max_steps` is
// TrainerOptions::max_steps). Every error names the key, where it was set
// (file:line or the command-line override) and what was expected.
#pragma once

#include <array>
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

// ---- the keys ---------------------------------------------------------------
// Each config key is declared once, in config/keys.hpp (the table of every
// key: type, member, YAML name, default, check and meaning); the option
// structs below, the schema, the checks and `gantry keys` expand it.
//
// A choice is an enum with its names (ChoiceNames below): parsed once, here;
// code compares enum values, so a misspelled choice does not compile.

enum class DataFormat { kIdx, kImageFolder, kCifar10 };
enum class AcceleratorKind { kCpu, kCuda, kAuto };
enum class ProgressMode { kAuto, kBar, kLines, kNone };
enum class BufferBroadcast { kOnRead, kEveryStep };
enum class GradCompression { kNone, kFp16 };
enum class GradTransport { kAuto, kGloo, kShm };
enum class WeightLayout { kAuto, kAsBuilt };
enum class ClipAlgorithm { kNorm, kValue };
enum class ReadMetrics { kAuto, kEveryStep, kOnLog };
enum class PrecisionMode { k32, k32True, kBf16Mixed };
enum class SchedulerKind { kNone, kStep, kCosine, kLinear };
enum class ScheduleInterval { kStep, kEpoch };
enum class MonitorMode { kMin, kMax };
enum class ProfilerKind { kNone, kSimple, kTrace };
enum class KeepBatch { kPerRank, kGlobal };

/// A choice's names, in the order of its enum's values; `note` follows the
/// list in the error line.
template <class E>
struct ChoiceNames;
#define GANTRY_CHOICE(E, NOTE, ...)                 \
  template <>                                       \
  struct ChoiceNames<E> {                           \
    static constexpr std::array names{__VA_ARGS__}; \
    static constexpr const char* note = NOTE;       \
  };
GANTRY_CHOICE(DataFormat, "", "idx", "image_folder", "cifar10")
GANTRY_CHOICE(AcceleratorKind, "", "cpu", "cuda", "auto")
GANTRY_CHOICE(ProgressMode, "", "auto", "bar", "lines", "none")
GANTRY_CHOICE(BufferBroadcast, "", "on_read", "every_step")
GANTRY_CHOICE(GradCompression, "", "none", "fp16")
GANTRY_CHOICE(GradTransport, "", "auto", "gloo", "shm")
GANTRY_CHOICE(WeightLayout, "", "auto", "as_built")
GANTRY_CHOICE(ClipAlgorithm, "", "norm", "value")
GANTRY_CHOICE(ReadMetrics, "", "auto", "every_step", "on_log")
GANTRY_CHOICE(PrecisionMode, " (16-mixed, fp16 with loss scaling, is not supported: bf16 needs no scaler)", "32",
              "32-true", "bf16-mixed")
GANTRY_CHOICE(SchedulerKind, "", "none", "step", "cosine", "linear")
GANTRY_CHOICE(ScheduleInterval, "", "step", "epoch")
GANTRY_CHOICE(MonitorMode, "", "min", "max")
GANTRY_CHOICE(KeepBatch, "", "per_rank", "global")
GANTRY_CHOICE(ProfilerKind, "", "none", "simple", "trace")
#undef GANTRY_CHOICE

/// The name of a choice's value ("cifar10").
template <class E>
const char* choice_name(E value) {
  return ChoiceNames<E>::names[static_cast<size_t>(value)];
}

/// A number of batches as Lightning writes one: a whole number is a count
/// (`10`), a number with a point a fraction of the epoch's batches (`0.25`;
/// `1.0`: all of them). `trainer.fast_dev_run` also takes `true` (1) and
/// `false` (0). Read from the YAML text, so `1` and `1.0` differ.
struct GANTRY_CORE_EXPORT BatchCount {
  int64_t count = -1;      ///< batches; -1: the fraction
  double fraction = 1.0;   ///< of the epoch's batches, when count is -1
  bool from_bool = false;  ///< written as true/false
  bool is_fraction() const { return count < 0; }
  /// How many of `total` batches (a fraction rounds down, at least 1 when > 0).
  int64_t of(int64_t total) const;
  /// Zero batches (a count of 0, or the fraction 0.0).
  bool none() const { return is_fraction() ? fraction <= 0 : count == 0; }
  /// Every batch (the fraction 1.0).
  bool all() const { return is_fraction() && fraction >= 1.0; }
  std::string text() const;  ///< as YAML would write it back: "10", "0.25", "true"
};

#include "config/keys.hpp"  // after the choices its defaults name

#define GANTRY_DECLARE_OPTION(type, member, key, def, check, expected, doc) type member = def;

struct GANTRY_CORE_EXPORT TrainerOptions {
  GANTRY_KEYS_TRAINER(GANTRY_DECLARE_OPTION)
  double max_time_seconds() const;  ///< max_time parsed; <= 0 when unset
  /// Whether validation runs at all (val_every_n_epochs or val_every_n_steps,
  /// and not limit_val_batches=0).
  bool validates() const { return (val_every_n_epochs > 0 || val_every_n_steps > 0) && !limit_val_batches.none(); }
};
struct DataOptions {
  GANTRY_KEYS_DATA(GANTRY_DECLARE_OPTION)
};
struct CheckpointOptions {
  GANTRY_KEYS_CHECKPOINT(GANTRY_DECLARE_OPTION)
};
/// The `early_stopping:` section (train/callbacks/monitored.cpp).
struct EarlyStoppingOptions {
  GANTRY_KEYS_EARLY_STOPPING(GANTRY_DECLARE_OPTION)
};
/// The `slurm:` section, for `gantry submit` (nodes and tasks come from
/// trainer.num_nodes and trainer.devices).
struct SlurmOptions {
  GANTRY_KEYS_SLURM(GANTRY_DECLARE_OPTION)
};
/// The `monitor:` section: the live stream served by rank 0 (docs/protocol.md).
struct MonitorOptions {
  GANTRY_KEYS_MONITOR(GANTRY_DECLARE_OPTION)
};
/// The `ema:` section (optim/ema.hpp).
struct EmaOptions {
  GANTRY_KEYS_EMA(GANTRY_DECLARE_OPTION)
};
/// The `metrics:` section: the sample-quality score (docs/quality.md).
struct MetricsOptions {
  GANTRY_KEYS_METRICS(GANTRY_DECLARE_OPTION)
};
/// `optimizers.<name>.*`: what the trainer does around one optimizer's step
/// (`<name>` as configure_optimizers() names it). trainer.gradient_clip_* are
/// the defaults for every optimizer, as in Lightning.
struct OptimizerOptions {
  GANTRY_KEYS_OPTIMIZER(GANTRY_DECLARE_OPTION)
};
/// The `system:` section: the plugin; its own keys are the plugin's (SystemParams).
struct SystemOptions {
  GANTRY_KEYS_SYSTEM(GANTRY_DECLARE_OPTION)
};

struct ExperimentConfig;

/// A key whose value differs between two configs (a checkpoint's and a resume's).
struct ConfigChange {
  std::string key;     ///< "system.lr", "trainer.max_steps", "optimizers.g.scheduler"
  std::string before;  ///< YAML text; "(unset)" when absent
  std::string after;
};
/// Every leaf of `before.to_yaml()` and `after.to_yaml()` that differs, in key order.
GANTRY_CORE_EXPORT std::vector<ConfigChange> config_changes(const ExperimentConfig& before,
                                                            const ExperimentConfig& after);

/// One key as declared: for `gantry keys` and the README's table.
struct KeyDoc {
  std::string key;           ///< "trainer.max_steps", "optimizers.<name>.scheduler"
  std::string type;          ///< "integer", "number", "true/false", "text", or the choices: "`cpu`, `cuda`, `auto`"
  std::string default_text;  ///< the default as YAML text ("" when empty)
  std::string doc;           ///< the meaning
};
/// Every key, in the order config.yaml lists them.
GANTRY_CORE_EXPORT std::vector<KeyDoc> config_keys();
/// config_keys() as a Markdown table (key | default | meaning).
GANTRY_CORE_EXPORT std::string config_keys_markdown();

/// A resolved, validated experiment.
struct GANTRY_CORE_EXPORT ExperimentConfig {
  GANTRY_KEYS_TOP(GANTRY_DECLARE_OPTION)
  SystemOptions system;
  DataOptions data;
  TrainerOptions trainer;
  CheckpointOptions checkpoint;
  EarlyStoppingOptions early_stopping;
  SlurmOptions slurm;
  MonitorOptions monitor;
  EmaOptions ema;
  MetricsOptions metrics;
  std::map<std::string, OptimizerOptions> optimizers;  ///< by optimizer name; see optimizer()

  /// The options of optimizer `name`: its `optimizers.<name>` section over
  /// the trainer-wide defaults.
  OptimizerOptions optimizer(const std::string& name) const;

  std::string source;        ///< the file it came from ("" when built in code)
  YAML::Node system_params;  ///< system section minus `plugin`
  /// The `search:` block (`gantry search`'s space, docs/search.md): each
  /// searched key and its distribution's text, in file order. Train and
  /// sweep ignore it; the search checks it.
  std::vector<std::pair<std::string, std::string>> search_space;
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
  /// The resolved value of `key` ("trainer.seed", "optimizers.g.lr": over the
  /// trainer's defaults) as YAML text, "" when unset; std::invalid_argument
  /// naming an unknown key and the nearest one (Params::config_value).
  std::string value_text(const std::string& key) const;
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
  std::string config_value(const std::string& key) const override { return cfg_.value_text(key); }

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
GANTRY_CORE_EXPORT std::string nearest_key(const std::string& word, const std::vector<std::string>& candidates);

}  // namespace gantry
