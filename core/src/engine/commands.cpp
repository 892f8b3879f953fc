// The engine's commands (gantry/engine.hpp): what `gantry train`, `validate`,
// `sample` and `plugins` do. The runner only parses their arguments.
#include "gantry/engine.hpp"

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <csignal>
#include <malloc.h>

#include <filesystem>
#include <ctime>
#include <fstream>
#include <optional>

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>

#include "config/config.hpp"
#include "distributed/dist_env.hpp"
#include "files/files.hpp"
#include "io/run_dir.hpp"
#include "data/image_grid.hpp"
#include "data/load_images.hpp"
#include "distributed/distributed.hpp"
#include "gantry/version.hpp"
#include "io/metrics_csv.hpp"
#include "io/progress.hpp"
#include "plugin/plugin_loader.hpp"
#include "runtime/crash.hpp"
#include "runtime/runtime.hpp"
#include "checkpoint/file.hpp"
#include "quality/quality.hpp"
#include "checkpoint/resolve.hpp"
#include "train/trainer.hpp"

namespace fs = std::filesystem;

namespace gantry::engine {

namespace {

// One sample's shape as "1x28x28".
std::string join_shape(c10::IntArrayRef sample) {
  std::string s;
  for (size_t i = 0; i < sample.size(); ++i) s += (i ? "x" : "") + std::to_string(sample[i]);
  return s;
}
std::string join_shape(const torch::Tensor& batch) { return join_shape(batch.sizes().slice(1)); }

// The one line describing the engine, printed at the start of train/validate.
void print_banner(const Experiment& e, int threads) {
  const BlasInfo blas = detect_blas();
  std::printf("gantry %s | plugin %s | %s, %d thread%s\n", GANTRY_VERSION, e.system->manifest().summary().c_str(),
              blas.name.c_str(), threads, threads == 1 ? "" : "s");
  const std::string warn = blas_warning(blas);
  if (!warn.empty()) std::fprintf(stderr, "%s\n", warn.c_str());
}

// The data a fit trains on: the system's own (SDK 1.1 train_dataset), or the
// images data.* names (the training split, and the validation split when
// validation runs; an image folder is resized to the plugin's shape). `print`:
// rank 0 says what it found. Returns the training samples.
int64_t give_data(Experiment& exp, bool print) {
  const ExperimentConfig& cfg = exp.config;
  if (exp.own_data) {
    if (print)
      std::printf("data: plugin %s's own, %ld samples%s\n", exp.system->manifest().name.c_str(),
                  long(exp.train_data->size()),
                  exp.val_data ? (", validation " + std::to_string(exp.val_data->size())).c_str() : "");
    return exp.train_data->size();
  }
  const DataSpec spec = exp.system->data_spec();
  check_data_kind(spec, exp.system->manifest().name);
  const ImageDataset train = load_split(cfg.data, Split::kTrain, spec.shape);
  if (print)
    std::printf("data: %ld images %s from %s\n", long(train.size()), join_shape(train.images).c_str(),
                train.images_file.c_str());
  std::optional<ImageDataset> val;
  if (cfg.trainer.validates()) {
    val = load_split(cfg.data, Split::kVal, spec.shape);
    if (print) std::printf("validation data: %ld images from %s\n", long(val->size()), val->images_file.c_str());
  }
  exp.use_images(train, val ? &*val : nullptr);  // the shape check
  return train.size();
}

// trainer.resume: "auto" (the default when SLURM restarts a requeued job) finds
// the newest valid checkpoint of the experiment; "" starts fresh, as does
// "fresh" (also on a SLURM restart, and when every checkpoint is unreadable).
// A checkpoint, a run or an experiment directory (through any links) is
// resolved as sample and serve resolve it (checkpoint/resolve.hpp), for its
// newest. Sets trainer.resume to the file's real path ("" for a fresh
// start) and returns the file, read once (the Experiment's resume_file).
std::shared_ptr<const CheckpointFile> resolve_resume(ExperimentConfig& cfg, bool print) {
  std::string& resume = cfg.trainer.resume;
  if (resume == "fresh") {
    resume.clear();
    return nullptr;
  }
  const char* restarts = std::getenv("SLURM_RESTART_COUNT");
  if (resume.empty() && restarts && std::atoi(restarts) > 0) resume = "auto";
  if (resume.empty()) return nullptr;
  const bool automatic = resume == "auto";
  const std::string given = automatic ? (fs::path(cfg.trainer.out_dir) / cfg.name).string() : resume;
  std::vector<std::string> skipped;
  ResolvedCheckpoint found;
  try {
    found = resolve_checkpoint(given, CheckpointUse::kResume, &skipped);
  } catch (const CheckpointError& e) {
    if (!automatic || std::filesystem::exists(given)) throw ConfigError(cfg.where("trainer.resume") + ": " + e.what());
  }
  if (print)
    for (const auto& w : skipped) std::fprintf(stderr, "warning: %s\n", w.c_str());
  // Checkpoints there, none readable: starting from step 0 would silently
  // throw the run's training away (and overwrite its `latest`).
  if (!found.found() && (!skipped.empty() || !automatic))
    throw CheckpointError(cfg.where("trainer.resume") + ": trainer.resume=" + resume + ": " +
                          (skipped.empty()
                               ? "no checkpoint in " + given
                               : "every checkpoint in " + given + " is unreadable (" + std::to_string(skipped.size()) +
                                     (skipped.size() == 1 ? " file" : " files") + ", see the warnings above)") +
                          ": nothing to resume from; " +
                          (automatic ? "move them away, or set trainer.resume=fresh to start again from step 0"
                                     : "name a checkpoint, or set trainer.resume=fresh to start again from step 0"));
  if (print) {
    if (found.found())
      std::printf("resume: %s\n", found.why.c_str());
    else
      std::printf("resume: no checkpoint in %s yet, starting fresh\n", given.c_str());
  }
  resume = found.path;
  return found.file;
}

// A run directory made for this run, removed again (and the experiment's
// `latest` link pointed back where it was) when the run is refused before it
// wrote anything: a refused config leaves no empty run behind.
class FreshRunDir {
 public:
  FreshRunDir(std::string experiment_dir, std::string previous_latest)
      : experiment_(std::move(experiment_dir)), previous_(std::move(previous_latest)) {}
  void made(std::string run_dir) { run_ = std::move(run_dir); }
  void keep() { run_.clear(); }
  ~FreshRunDir() {
    if (run_.empty() || !unused()) return;
    std::error_code ec;
    fs::remove_all(run_, ec);
    if (previous_.empty())
      fs::remove(fs::path(experiment_) / "latest", ec);
    else
      point_latest(experiment_, previous_);
  }

 private:
  // Nothing in it but what train writes before the first step (config.yaml
  // and its history, the lock, empty images/ and checkpoints/).
  bool unused() const {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(run_, ec)) {
      const std::string name = e.path().filename().string();
      if (name == "config.yaml" || name == "config_history.yaml" || name == ".lock") continue;
      if ((name == "images" || name == "checkpoints") && fs::is_empty(e.path(), ec)) continue;
      return false;
    }
    return !ec;
  }
  std::string experiment_, previous_, run_;
};

// A checkpoint <out_dir>/<name>/<run>/checkpoints/x.ckpt continues in <run>;
// anything else gets a new run directory (`fresh` is told). `resume`: the
// real path (links resolved: through `latest` it is the run `latest` names,
// and `latest` is pointed at that run, never at itself).
std::string run_dir_for(const ExperimentConfig& cfg, const std::string& resume, FreshRunDir& fresh) {
  if (!resume.empty()) {
    std::error_code ec;
    const fs::path run = fs::weakly_canonical(fs::absolute(resume), ec).parent_path().parent_path();
    const fs::path experiment = fs::path(cfg.trainer.out_dir) / cfg.name;
    if (run.parent_path().filename() == experiment.filename() && fs::equivalent(run.parent_path(), experiment, ec) &&
        run.filename() != "latest") {
      point_latest(experiment.string(), run.filename().string());
      return (experiment / run.filename()).string();
    }
  }
  const std::string made = make_run_dir(cfg.trainer.out_dir, cfg.name);
  fresh.made(made);
  return made;
}

// The run directory's config: config.yaml is what this start runs (itself a
// config: `gantry train run/config.yaml` repeats it); config_history.yaml
// keeps every start's, appended, each headed by when and from where it began
// and what a resume changed.
void record_config(const std::string& run_dir, const ExperimentConfig& cfg, const std::vector<ConfigChange>& changes) {
  write_file_atomic((fs::path(run_dir) / "config.yaml").string(), cfg.to_yaml());
  char stamp[32];
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  std::string head = std::string("--- # ") + stamp + ": ";
  if (cfg.trainer.resume.empty()) {
    head += "a fresh run";
  } else {
    head += "resumed from " + cfg.trainer.resume;
    for (size_t i = 0; i < changes.size(); ++i)
      head += (i ? ", " : "; changed: ") + changes[i].key + " " + changes[i].before + " -> " + changes[i].after;
  }
  std::ofstream history(fs::path(run_dir) / "config_history.yaml", std::ios::app);
  history << head << "\n" << cfg.to_yaml();
  if (!history) std::fprintf(stderr, "warning: cannot append to %s/config_history.yaml\n", run_dir.c_str());
}

// After a SIGUSR1/SIGUSR2 stop under SLURM: requeue the job; it resumes by itself.
// After a stop by `stop_signal`: whether the job will come back. Rank 0 of a
// SLURM job stopped by USR1/USR2 requeues it (the other ranks count on it);
// a stop anywhere else is only a stop, said in one line.
bool requeue_if_asked(int stop_signal, bool zero) {
  if (!requeue_follows(stop_signal)) {
    if (zero && (stop_signal == SIGUSR1 || stop_signal == SIGUSR2))
      std::printf("stopped by SIG%s outside SLURM: nothing requeues this run; resume it with trainer.resume=auto\n",
                  sigabbrev_np(stop_signal));
    return false;
  }
  if (!zero) return true;
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string cmd = std::string("scontrol requeue ") + job;
  std::fflush(nullptr);
  // The requeue cancels this job's step at once, and the cancellation's
  // SIGTERM reaches every process of the step: scontrol, started ignoring
  // SIGTERM and SIGINT (kept across exec), finishes telling its result
  // (seen at 32 ranks: killed by it, a requeue that had happened read as failed).
  const pid_t child = ::fork();
  if (child == 0) {
    ::signal(SIGTERM, SIG_IGN);
    ::signal(SIGINT, SIG_IGN);
    ::execlp("scontrol", "scontrol", "requeue", job, static_cast<char*>(nullptr));
    ::_exit(127);
  }
  int status = 0;
  pid_t got = child > 0 ? -1 : 0;
  while (child > 0 && (got = ::waitpid(child, &status, 0)) < 0 && errno == EINTR) {
  }
  if (got == child && WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    std::printf("requeued SLURM job %s: it will resume from the checkpoint\n", job);
    return true;
  }
  const std::string why = child < 0                    ? std::string("cannot fork: ") + std::strerror(errno)
                          : WIFSIGNALED(status)        ? "killed by signal " + std::to_string(WTERMSIG(status))
                          : WEXITSTATUS(status) == 127 ? std::string("no scontrol on the PATH")
                                                       : "exit " + std::to_string(WEXITSTATUS(status));
  std::fprintf(stderr, "warning: `%s` failed (%s): the job was not requeued\n", cmd.c_str(), why.c_str());
  return false;
}

// trainer.fast_dev_run=n (Lightning's): n batches of training, one validation
// pass of at most n batches (unless trainer.limit_val_batches=0), the sample
// grids at the start and the end, one checkpoint; in a scratch run directory
// (rank 0 makes it; train removes it after). What else the config asks that
// would make the run longer or leave something behind is off: a resume, the
// quality score, best checkpoints, early stopping, the live stream.
// Returns the scratch directory ("" on other ranks).
std::string fast_dev_run(ExperimentConfig& cfg, bool zero) {
  auto& t = cfg.trainer;
  const int64_t n = t.fast_dev_run.count;
  t.max_steps = n;
  t.max_epochs = -1;
  t.max_time.clear();
  t.resume = "fresh";
  t.log_every_n_steps = 1;
  t.image_every_n_steps = 0;
  if (!t.limit_val_batches.none()) {
    t.limit_val_batches = BatchCount{n};
    t.val_every_n_epochs = 0;
    t.val_every_n_steps = n;
  }
  cfg.checkpoint.every_n_steps = 0;
  cfg.checkpoint.save_last = true;
  cfg.checkpoint.keep_last = 0;
  cfg.checkpoint.monitor.clear();
  cfg.early_stopping.monitor.clear();
  cfg.metrics.quality_every_n_steps = 0;
  cfg.monitor.enabled = false;
  if (!zero) return "";
  std::string scratch = (fs::temp_directory_path() / "gantry-fast-dev-run-XXXXXX").string();
  if (!::mkdtemp(scratch.data())) throw Error("fast_dev_run: cannot make a scratch directory " + scratch);
  t.out_dir = scratch;
  std::printf(
      "fast_dev_run: %ld batch%s of training, one validation pass, the sample grids and one checkpoint in %s "
      "(removed after)\n",
      long(n), n == 1 ? "" : "es", scratch.c_str());
  return scratch;
}

// fast_dev_run's report: each hook's calls and time on rank 0.
void print_hook_times(const FitResult& r) {
  std::printf("fast_dev_run: every hook ran without an error in %.2f s; rank 0's calls:\n", r.seconds);
  std::printf("  %-24s %6s %10s %10s\n", "hook", "calls", "mean ms", "total ms");
  for (const auto& [hook, time] : r.hook_times)
    std::printf("  %-24s %6ld %10.2f %10.2f\n", hook.c_str(), long(time.calls),
                1e3 * time.seconds / double(std::max<int64_t>(1, time.calls)), 1e3 * time.seconds);
  if (!r.hook_times.count("validation_step"))
    std::printf("  validation_step: not called (no validation data, or trainer.limit_val_batches=0)\n");
}

}  // namespace

int train(const std::string& config_path, const std::vector<std::string>& overrides) {
  ExperimentConfig cfg = ExperimentConfig::load(config_path, overrides);
  if (cfg.trainer.huge_pages) advise_huge_heap();  // before the model, optimizer state and data exist
  const DistEnv dist = DistEnv::from(DistEnv::process_environment());
  dist.check(cfg.trainer.num_nodes, cfg.trainer.devices, cfg.where("trainer.devices"));
  if (dist.world_size > 1) {  // before the data: every rank says it at once (the process group checks again)
    raise_file_limit();
    if (const std::string short_of = check_file_limit(dist.rank, dist.world_size); !short_of.empty())
      throw Error("rank " + std::to_string(dist.rank) + ": " + short_of);
  }
  const bool zero = dist.rank == 0;
  const std::string scratch = cfg.trainer.fast_dev_run.count > 0 ? fast_dev_run(cfg, zero) : "";
  std::shared_ptr<const CheckpointFile> resume_file = resolve_resume(cfg, zero);
  Experiment exp = Experiment::build(cfg);
  exp.resume_file = std::move(resume_file);
  const int threads = configure_threads(cfg.trainer.threads, dist.local_world_size);
  if (zero) print_banner(exp, threads);
  if (dist.world_size > 1) std::printf("%s\n", dist.describe().c_str());
  // The ranks of a host decode the IDX data once and map one copy; the files
  // go once the rendezvous shows every rank has loaded its data.
  struct ReleaseSharedData {
    ~ReleaseSharedData() { release_shared_idx(); }
  } release_shared_data;
  share_decoded_idx_on_host(dist.local_world_size > 1);
  give_data(exp, zero);

  std::string run_dir;
  const fs::path experiment_dir = fs::path(cfg.trainer.out_dir) / cfg.name;
  std::error_code ec;
  FreshRunDir fresh(experiment_dir.string(), fs::read_symlink(experiment_dir / "latest", ec).string());
  std::optional<RunDirLock> run_dir_lock;  // held until the process ends
  if (zero) {                              // only rank 0 writes the run directory
    run_dir = run_dir_for(cfg, cfg.trainer.resume, fresh);
    run_dir_lock.emplace(run_dir);
    std::printf("run directory: %s\n", run_dir.c_str());
  }
  std::fflush(stdout);

  install_stop_signals();
  install_crash_handlers();  // a plugin's segfault or abort: one line and a `failed` record, then the signal
  Trainer trainer(std::move(exp), run_dir, dist);
  release_shared_idx();  // the rendezvous is done: every rank of this host has mapped the data
  // What start-up freed (the plugin's and LibTorch's set-up, a decode, the
  // checkpoint read) goes back to the system: the tuned allocator would keep
  // it for good, in each of N ranks (docs/scaling.md, memory).
  ::malloc_trim(0);
  if (zero) record_config(run_dir, cfg, trainer.resume_changes());  // after a resume's changes were accepted
  const FitResult r = trainer.fit();
  fresh.keep();
  // Exit 0 only when the job comes back (a requeue); any other stop is 128 + signal.
  const bool preempted = requeue_if_asked(r.stop_signal, zero);
  if (!zero) return r.stop_signal && !preempted ? 128 + r.stop_signal : 0;
  // steps/s of this process's own batches (a resumed run's earlier ones ran elsewhere).
  const double steps_per_s = r.seconds > 0 ? double(r.steps_run) / r.seconds : 0;
  std::printf("%s at step %ld (epoch %ld): %s, after %.1f s (%.1f steps/s)\n",
              r.stop_signal ? "stopped"
              : r.paused    ? "paused"
                            : "done",
              long(r.state.global_step), long(r.state.epoch), r.stop_reason.c_str(), r.seconds, steps_per_s);
  for (const auto& [name, v] : r.last_values) std::printf("  %s %.4f\n", name.c_str(), v);
  if (dist.world_size > 1)  // checked at the end by the replicas callback: a difference fails the fit
    std::printf("replicas bit-identical across %d ranks\n", dist.world_size);
  if (!scratch.empty()) {
    print_hook_times(r);
    std::error_code gone;
    fs::remove_all(scratch, gone);
  } else {
    // What a resume from it would redo (a stop between two checkpoints; save_last false).
    std::string redo;
    if (!r.last_checkpoint.empty() && r.last_checkpoint_step >= 0 && r.last_checkpoint_step < r.state.global_step)
      redo = " (step " + std::to_string(r.last_checkpoint_step) + ": a resume from it trains steps " +
             std::to_string(r.last_checkpoint_step + 1) + "-" + std::to_string(r.state.global_step) + " again)";
    else if (!r.last_checkpoint.empty() && r.stop_signal)
      redo = " (a resume goes on from step " + std::to_string(r.state.global_step) + ": nothing is trained again)";
    // The run's event files, and the folder TensorBoard is meant for (every run of the experiment, each once).
    const fs::path tb_abs = tensorboard_dir(run_dir);
    std::error_code ec;  // relative to here as the lines above when the run directory is
    fs::path tb = fs::path(run_dir).is_relative() ? fs::proximate(tb_abs, ec) : tb_abs;
    if (ec || tb.empty()) tb = tb_abs;
    std::printf("checkpoint: %s%s\nimages: %s\ntensorboard: %s (tensorboard --logdir %s)\n",
                r.last_checkpoint.empty() ? "none" : r.last_checkpoint.c_str(), redo.c_str(),
                (fs::path(run_dir) / "images").c_str(), tb.c_str(), tb.parent_path().c_str());
  }
  return r.stop_signal && !preempted ? 128 + r.stop_signal : 0;
}

namespace {

// What train will need of trainer.out_dir: a directory it can create
// entries in (or one it can create, in a writable parent).
void check_writable_dir(const std::string& dir, const std::string& what) {
  fs::path p = fs::absolute(dir);
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) throw Error(what + " '" + dir + "': " + p.string() + " is not a directory");
  // Try it (access() says yes to root on /proc, and knows no quota): make
  // and remove an empty directory where train would make its own.
  std::string probe = (p / ".gantry-validate-XXXXXX").string();
  if (!::mkdtemp(probe.data()))
    throw Error(what + " '" + dir + "': " + p.string() + " is not writable (" + std::strerror(errno) + ")");
  ::rmdir(probe.c_str());
}

}  // namespace

int validate(const std::string& config_path, const std::vector<std::string>& overrides) {
  ExperimentConfig cfg = ExperimentConfig::load(config_path, overrides);
  Experiment exp = Experiment::build(cfg);
  print_banner(exp, configure_threads(cfg.trainer.threads));
  const int64_t samples = give_data(exp, true);
  const DataSpec spec = exp.system->data_spec();
  check_writable_dir(cfg.trainer.out_dir, cfg.where("trainer.out_dir") + ": trainer.out_dir");
  if (cfg.metrics.quality_every_n_steps > 0) {  // the classifier loads and embeds this plugin's samples' shape
    const FeatureModel fm(cfg.metrics.quality_classifier, torch::kCPU,
                          cfg.where("metrics.quality_classifier") + ": metrics.quality_classifier");
    fm.check_shape(exp.system->manifest().name, spec.shape);
    std::printf("quality score: plugin %s from %s\n", fm.plugin_name().c_str(), fm.checkpoint().c_str());
  }
  // The checkpoint train would resume from (trainer.resume resolved as train resolves it).
  std::shared_ptr<const CheckpointFile> resume_file = resolve_resume(cfg, true);
  if (resume_file && resume_file->meta().plugin != exp.system->manifest().name)
    throw CheckpointError("checkpoint " + cfg.trainer.resume + " was written by plugin '" + resume_file->meta().plugin +
                          "', this config uses '" + exp.system->manifest().name + "'");
  // What train checks before step 1: modules and optimizers (sections, parameters
  // no module holds), ema.modules, the resume checkpoint's shapes.
  Experiment checked = Experiment::build(cfg);
  checked.resume_file = std::move(resume_file);
  check_before_training(std::move(checked));
  std::printf("%s: OK (plugin %s, %ld samples%s, batch %ld)\n", config_path.c_str(),
              exp.system->manifest().summary().c_str(), long(samples), exp.own_data ? " of its own data" : "",
              long(cfg.data.batch_size));
  return 0;
}

void check_system(const std::string& config_path, const std::vector<std::string>& overrides) {
  ExperimentConfig cfg = ExperimentConfig::load(config_path, overrides);
  cfg.trainer.weight_layout = WeightLayout::kAsBuilt;  // the layout is no check, and its line would repeat per value
  check_before_training(Experiment::build(cfg));
}

int list_plugins() {
  const auto found = Plugin::list_all();
  if (found.empty()) {
    std::string dirs;
    for (const auto& d : Plugin::search_path()) dirs += "\n  " + d;
    std::printf("no plugins found in:%s\n", dirs.c_str());
    return 1;
  }
  for (const auto& [path, summary] : found) std::printf("%s\n  %s\n", summary.c_str(), path.c_str());
  return 0;
}

int sample(const SampleOptions& o) {
  const ResolvedCheckpoint resolved = require_checkpoint(o.checkpoint, CheckpointUse::kInference);
  std::printf("checkpoint: %s\n", resolved.why.c_str());
  const std::string& checkpoint = resolved.path;
  const std::string& out = o.output;
  const std::string& tensor_out = o.tensors;
  const int64_t n = o.n;
  const TrainedSystem trained = Experiment::load_trained(*resolved.file, torch::kCPU, o.plugin);
  if (!trained.plugin_note.empty()) std::printf("%s\n", trained.plugin_note.c_str());
  const Experiment& exp = trained.experiment;
  if (trained.ema_tensors > 0)  // the run kept an EMA of its weights: sample with it, as its grids did
    std::printf("sampling with the EMA weights (ema.decay %g, %zu tensors)\n", exp.config.ema.decay,
                trained.ema_tensors);
  torch::manual_seed(static_cast<uint64_t>(o.seed));
  torch::NoGradGuard no_grad;
  torch::Tensor input;
  if (o.labels.empty()) {
    input = exp.system->sample_input(n);
  } else {  // sample i of class labels[i % k]: with k images a row, a class a column
    const torch::Tensor given = torch::tensor(o.labels, torch::kInt64);
    input = exp.system->conditional_input(given.repeat({(n + given.size(0) - 1) / given.size(0)}).slice(0, 0, n));
    if (!input.defined())
      throw Error("--labels: plugin " + exp.system->name() +
                  " is not conditional (it has no conditional_input(labels), SDK 1.3): drop --labels");
  }
  const torch::Tensor images = exp.system->forward(input);
  const DataSpec spec = exp.system->data_spec();
  if (!exp.own_data) check_data_kind(spec, exp.system->name());  // else: its own data
  // A system whose samples are not images says how to draw them (render_samples).
  torch::Tensor shown = images;
  double low = spec.low, high = spec.high;
  if (const torch::Tensor rendered = exp.system->render_samples(images); rendered.defined()) {
    shown = rendered;
    low = 0;
    high = 1;
  }
  // Still not images (a classifier's logits): no grid; the tensors are the samples.
  const bool grid = shown.dim() == 4;
  if (!grid && tensor_out.empty())
    throw Error("plugin " + exp.system->manifest().name + "'s samples are " + join_shape(images) +
                ", not images [N, C, H, W]: no grid to draw; save them with --tensors FILE");
  if (grid)
    write_file_atomic(out, encode_png(make_grid(
                               shown, grid_columns(shown.size(0), o.rows > 0 ? o.rows : exp.config.trainer.grid_rows),
                               2, low, high)));
  if (!tensor_out.empty()) {  // {"input": ..., "output": ...}, readable by Python's torch.load
    c10::Dict<std::string, torch::Tensor> d;
    d.insert("input", input);
    d.insert("output", images);
    const auto bytes = torch::pickle_save(d);
    write_file_atomic(tensor_out, std::string(bytes.begin(), bytes.end()));
  }
  std::printf("wrote %ld samples from %s to %s\n", long(n), checkpoint.c_str(),
              grid ? (out + (tensor_out.empty() ? "" : " and " + tensor_out)).c_str() : tensor_out.c_str());
  return 0;
}

namespace {

// The one error line; on a line of its own when a progress bar was drawn.
void print_error(const std::string& text) {
  std::fflush(stdout);
  std::fprintf(stderr, "%sgantry: error: %s\n", progress_line_open() ? "\n" : "", text.c_str());
}

}  // namespace

int free_local_port() { return gantry::free_local_port(); }

std::string file_limit_for_ranks(int world_size) {
  raise_file_limit();
  return world_size > 1 ? check_file_limit(0, world_size) : "";
}

void prepare_process() {
  configure_allocator();
  raise_file_limit();
}

int run_command(const std::function<int()>& command) {
  try {
    return command();
  } catch (const Error& e) {
    print_error(e.what());
  } catch (const c10::Error& e) {
    print_error(e.what_without_backtrace());
  } catch (const std::bad_alloc&) {
    print_error(
        "out of memory (std::bad_alloc): lower data.batch_size or the model's size, or give the "
        "process more memory (ulimit -v, the job's --mem)");
  } catch (const std::exception& e) {
    print_error(e.what());
  } catch (...) {  // plugin code is wrapped where it is called; this is the net under everything else
    print_error(
        "something threw a value that is not a std::exception (no message): a bug; please report it with the "
        "command that ran");
  }
  return 1;
}

JobSettings load_job(const std::string& config_path, const std::vector<std::string>& overrides) {
  const ExperimentConfig cfg = ExperimentConfig::load(config_path, overrides);
  JobSettings j;
  j.name = cfg.name;
  j.out_dir = cfg.trainer.out_dir;
  j.num_nodes = cfg.trainer.num_nodes;
  j.devices = cfg.trainer.devices;
  j.threads = cfg.trainer.threads;
  j.cuda = cfg.trainer.accelerator == AcceleratorKind::kCuda;
  j.max_steps = cfg.trainer.max_steps;
  j.log_every_n_steps = cfg.trainer.log_every_n_steps;
  j.val_every_n_steps = cfg.trainer.val_every_n_steps;
  j.quality_every_n_steps = cfg.metrics.quality_every_n_steps;
  const SlurmOptions& s = cfg.slurm;
  j.slurm = {s.partition, s.time, s.mem, s.account, s.signal, s.template_path, s.cpus_per_task, s.array_parallel};
  j.origins = cfg.origins;
  j.source = cfg.source;
  j.search_space = cfg.search_space;
  return j;
}

std::string exploit_checkpoint(const std::string& from, const std::string& to, int64_t step, uint64_t seed) {
  auto at_step = [&](const std::string& dir) {
    const ResolvedCheckpoint r = resolve_checkpoint(dir, CheckpointUse::kResume);
    if (!r.found()) throw CheckpointError("exploit: " + dir + " holds no checkpoint");
    if (r.file->meta().global_step != step)
      throw CheckpointError("exploit: the newest checkpoint of " + dir + " (" + r.path + ") is at step " +
                            std::to_string(r.file->meta().global_step) + ", not " + std::to_string(step));
    return r.path;
  };
  const std::string source = at_step(from), target = at_step(to);
  fork_checkpoint(source, target, seed);
  return target;
}

std::string keys_table() { return config_keys_markdown(); }

}  // namespace gantry::engine
