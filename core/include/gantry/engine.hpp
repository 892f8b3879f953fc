// The engine's one door for a front end: what `gantry train`, `validate`,
// `sample` and `plugins` do, and what launching and SLURM rendering read of a
// config. The `gantry` runner includes this header and the SDK's, nothing of
// core/src: it parses the command line, starts ranks and renders sbatch
// scripts; everything a train command does (resume, the run directory and its
// lock, data, the fit, requeue) happens behind these calls.
//
// Each command returns the process's exit status (0, 1, or 128 + the signal
// that stopped a run) and throws gantry::Error (a one-line message naming the
// culprit) for bad input; run_command() turns any exception into that line.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "gantry/errors.hpp"

namespace gantry::engine {

/// Once per process, before anything else: the allocator's settings (huge
/// pages, arenas) and the open-file limit raised to its hard limit (a
/// launcher holds a pipe per rank, a rank a socket per rank).
GANTRY_CORE_EXPORT void prepare_process();

/// Runs a command; any exception becomes the one error line on stderr
/// (`gantry: error: ...`, on a line of its own after a progress bar) and
/// exit status 1. LibTorch's backtrace is cut; std::bad_alloc says what to lower.
GANTRY_CORE_EXPORT int run_command(const std::function<int()>& command);

/// `gantry train CONFIG [key=value ...]`: one rank (the environment says
/// which: torchrun's, SLURM's or gantry launch's variables) of the experiment.
GANTRY_CORE_EXPORT int train(const std::string& config_path, const std::vector<std::string>& overrides);

/// `gantry validate`: every check `train` makes before step 1 (config, plugin,
/// modules and optimizers, data and its shape, out_dir writable, the quality
/// classifier, a resume checkpoint), without training. Prints `...: OK`.
GANTRY_CORE_EXPORT int validate(const std::string& config_path, const std::vector<std::string>& overrides);

/// What a config's values must pass before any data is read: the config's
/// own checks, the plugin's constructor (its refusal of system.* values),
/// its modules and optimizers. `gantry search` asks it of each extreme of a
/// space, so a value only the plugin refuses is one line before any trial.
GANTRY_CORE_EXPORT void check_system(const std::string& config_path, const std::vector<std::string>& overrides);

/// `gantry plugins`: each plugin found on the search path with its manifest
/// (probed in a child process, so a plugin that crashes on load is one line).
/// 1 when none is found.
GANTRY_CORE_EXPORT int list_plugins();

/// `gantry keys`: every config key as declared (config/config.hpp's lists):
/// a Markdown table of key, value type or choices, default and meaning.
/// The README's table is this text (a test compares them).
GANTRY_CORE_EXPORT std::string keys_table();

struct SampleOptions {
  std::string checkpoint;              ///< a checkpoint, or a run/experiment directory (best.ckpt, else the newest)
  int64_t n = 64;                      ///< samples
  std::string output = "samples.png";  ///< the PNG grid
  int64_t seed = 0;                    ///< seed of the sample inputs
  std::string tensors;                 ///< also the inputs and outputs as torch.load-able tensors
  std::string plugin;                  ///< a plugin (path or name) instead of the recorded one
  std::vector<int64_t> labels;         ///< a conditional system's classes, sample i gets labels[i % size]
  int64_t rows = 0;                    ///< the grid's rows (0: the run's trainer.grid_rows)
};

/// `gantry sample`: the trained system from a checkpoint (its EMA weights
/// when the run kept them), n samples as a PNG grid and/or tensors.
GANTRY_CORE_EXPORT int sample(const SampleOptions& options);

/// `gantry serve` (docs/serve.md). Its numbers are declared once, in
/// serve_options() (flag, help, bounds): the runner's command line and
/// serve() read the same table.
struct ServeOptions {
  std::string checkpoint;              ///< a checkpoint, or a run/experiment directory (best.ckpt, else the newest)
  std::string host = "127.0.0.1";      ///< the address to bind
  int64_t port = 8080;                 ///< 0: a free port (printed)
  std::string token;                   ///< when set: "Authorization: Bearer TOKEN" on every route but the probes
  std::string plugin;                  ///< a plugin (path or name) instead of the recorded one
  int64_t max_batch = 32;              ///< rows of one forward (dynamic batching; 1: off)
  int64_t max_wait_ms = 0;             ///< how long the first request waits for others (0: what is queued)
  int64_t max_n = 4096;                ///< rows one request may ask for
  int64_t max_queue = 1024;            ///< requests waiting; beyond: 503 with Retry-After
  uint64_t max_body = 64u << 20;       ///< bytes of a request body; beyond: 413
  int64_t workers = 1;                 ///< inference threads
  int64_t threads = 0;                 ///< intra-op threads (0: LibTorch's default)
  int64_t timeout_s = 30;              ///< a connection's read/write timeout and the drain's limit
  int64_t request_timeout_ms = 30000;  ///< a request not answered by then: 504 (0: never)
  bool watch = false;                  ///< swap in a newer checkpoint of the run/experiment directory
  int64_t watch_interval_ms = 1000;    ///< how often --watch looks
};

/// One number `gantry serve` takes: its flag, help, inclusive bounds and the
/// field of ServeOptions it sets.
struct ServeOption {
  const char* flag;  ///< "--max-batch"
  const char* help;
  int64_t min, max;
  int64_t ServeOptions::*field;
};
/// Every numeric option of `gantry serve`, in --help order.
GANTRY_CORE_EXPORT const std::vector<ServeOption>& serve_options();
/// Throws one line naming the first option out of its bounds (serve() calls it).
GANTRY_CORE_EXPORT void check_serve_options(const ServeOptions& options);

/// Serves the system until SIGTERM/SIGINT; 0 when every request was answered.
GANTRY_CORE_EXPORT int serve(const ServeOptions& options);

/// What launching and SLURM rendering read of an experiment: the checked
/// config's job-shaped keys.
struct JobSettings {
  std::string name;                   ///< the experiment's name
  std::string out_dir;                ///< trainer.out_dir
  int64_t num_nodes = 1;              ///< trainer.num_nodes
  int64_t devices = 1;                ///< trainer.devices (ranks per node)
  int64_t threads = 0;                ///< trainer.threads (0: the cores / local ranks)
  bool cuda = false;                  ///< trainer.accelerator=cuda: a GPU per rank
  int64_t max_steps = -1;             ///< trainer.max_steps
  int64_t log_every_n_steps = 50;     ///< trainer.log_every_n_steps
  int64_t val_every_n_steps = 0;      ///< trainer.val_every_n_steps
  int64_t quality_every_n_steps = 0;  ///< metrics.quality_every_n_steps (0: no quality score)
  struct Slurm {
    std::string partition, time, mem, account, signal, template_path;
    int64_t cpus_per_task = 0;
    int64_t array_parallel = 0;
  } slurm;
  /// Where each key was set (`configs/gan.yaml:12`, `command line`); where()
  /// gives the config's own name for a key left at its default.
  std::map<std::string, std::string> origins;
  std::string source;
  /// The config's `search:` block: searched key -> distribution text, in file order.
  std::vector<std::pair<std::string, std::string>> search_space;
  std::string where(const std::string& key) const {
    const auto it = origins.find(key);
    return it != origins.end() ? it->second : source.empty() ? "<config>" : source;
  }
};

/// Loads and checks a config with its overrides, as `train` would (every
/// key, value and choice; throws ConfigError naming the key and where it was
/// set), and returns its job settings.
GANTRY_CORE_EXPORT JobSettings load_job(const std::string& config_path, const std::vector<std::string>& overrides);

/// A run's metrics.csv summed up: its header and each column's last
/// non-empty value (rows may hold some columns only: validation's, the
/// quality score's). Both empty when it holds no value yet (or is missing).
struct LastMetrics {
  std::vector<std::string> columns;
  std::vector<std::string> values;
};
GANTRY_CORE_EXPORT LastMetrics last_metrics(const std::string& metrics_csv);

/// One metric of a run's metrics.csv: each row's step and value where the
/// row has one (a validation or quality row holds only its own columns), and
/// the header. Empty when the file is missing.
struct MetricSeries {
  std::vector<std::string> columns;
  std::vector<int64_t> steps;
  std::vector<std::string> values;
};
GANTRY_CORE_EXPORT MetricSeries metric_series(const std::string& metrics_csv, const std::string& metric);

/// PBT's exploit (gantry search --method pbt): the newest checkpoint of
/// experiment `to` (a trial's directory) becomes a copy of experiment
/// `from`'s newest, with new random streams from `seed` (fork_checkpoint in
/// checkpoint/file.hpp). Both must be at `step`: throws gantry::Error naming
/// the one that is not. Returns the file written. The same arguments write
/// the same file again (a rerun redoes an exploit the killed search began).
GANTRY_CORE_EXPORT std::string exploit_checkpoint(const std::string& from, const std::string& to, int64_t step,
                                                  uint64_t seed);

/// The engine's file helpers, for what the runner writes (sbatch scripts, a
/// sweep's status): an atomic write (temp, fsync, rename) and a bounded read
/// of a regular file; both throw gantry::Error naming the path.
GANTRY_CORE_EXPORT void write_file_atomic(const std::string& path, const std::string& bytes);
GANTRY_CORE_EXPORT std::string read_file(const std::string& path, uint64_t max_bytes = UINT64_MAX,
                                         const std::string& what = "file");

/// The cores this process may use (its affinity mask and cgroup quota).
GANTRY_CORE_EXPORT int available_cores();

/// "" when this process (and the ranks it starts, which inherit its limit)
/// may open the descriptors `world_size` local ranks need; else the line
/// saying how many rank 0 needs and how to raise the limit.
GANTRY_CORE_EXPORT std::string file_limit_for_ranks(int world_size);

/// A TCP port of 127.0.0.1 nobody listens on now: `gantry launch`'s MASTER_PORT.
GANTRY_CORE_EXPORT int free_local_port();

}  // namespace gantry::engine
