// gantry: the command-line runner.
//   gantry train CONFIG [key=value ...]      train an experiment
//   gantry launch -n N CONFIG [key=value ...] N local ranks of data-parallel training
//   gantry submit CONFIG [key=value ...] [--dry-run] [--wait]   render slurm/ and sbatch it
//   gantry search CONFIG key=DIST ... --trials N --budget S --metric M   ASHA over the space (docs/search.md)
//   gantry validate CONFIG [key=value ...]   check config, plugin and data without training
//   gantry plugins                            list the plugins found, with their manifests
//   gantry keys                               every config key: values, default, meaning
//   gantry sample --checkpoint PATH [-n 64] [-o grid.png] [--labels 0,1,2] [--rows R]
//   gantry serve CHECKPOINT|RUN_DIR [--port P] [--token T] [--max-batch 32] [--watch]   the system over HTTP
#include <CLI/CLI.hpp>
#include <boost/dll/runtime_symbol_info.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "gantry/engine.hpp"
#include "gantry/version.hpp"
#include "gantry_build_info.hpp"
#include "launch.hpp"
#include "submit.hpp"
#include "search.hpp"
#include "sweep.hpp"

using namespace gantry;

namespace {

// `gantry --version`: the version, the LibTorch it uses, and any part a plain
// (release) build left out because its packages were missing.
std::string version_text() {
  std::string v = std::string("gantry ") + GANTRY_VERSION + " (LibTorch " + GANTRY_TORCH_VERSION +
                  (GANTRY_WITH_CUDA ? ", CUDA" : ", CPU") + ")";
  const std::string left_out = GANTRY_LEFT_OUT;
  v += left_out.empty() ? "\nevery part built: gantry-monitor, gantry-view" : "\nleft out of this build: " + left_out;
  return v;
}

// `gantry search`'s command line (docs/search.md).
CLI::App* add_search(CLI::App& app, std::string& config, std::vector<std::string>& overrides, search::SearchOptions& se,
                     bool& smaller) {
  auto* search_cmd = app.add_subcommand(
      "search",
      "Search the space of key=DIST overrides (loguniform(a,b), uniform(a,b), int(a,b), choice(x,y)) with "
      "asynchronous successive halving (asha, its new trials random or tpe), population based training (pbt) or random "
      "search; rerun to continue "
      "(docs/search.md)");
  search_cmd->add_option("config", config, "Experiment YAML")->required();
  search_cmd->add_option("overrides", overrides, "key=value (every trial) or key=DIST (searched)");
  search_cmd
      ->add_option("--method", se.method,
                   "asha (pause at rungs, promote the top 1/eta), tpe (asha, new trials "
                   "from a Parzen estimator of the rung results), pbt (--trials "
                   "members, every --rung steps the bottom quarter copies the top quarter and perturbs) or "
                   "random (no rungs)")
      ->check(CLI::IsMember({"asha", "tpe", "pbt", "random"}));
  search_cmd->add_option("--trials", se.trials, "Trials sampled")->required()->check(CLI::Range(1, 100000));
  search_cmd->add_option("--budget", se.budget, "Steps of a trial that runs to the end (the last rung)")
      ->required()
      ->check(CLI::Range(int64_t(1), int64_t(1) << 50));
  search_cmd->add_option("--metric", se.metric, "The metrics.csv column rungs compare (quality_fd)")->required();
  search_cmd->add_flag("--max", se.maximize, "Larger is better (default: smaller)");
  search_cmd->add_flag("--min", smaller, "Smaller is better (the default)")->excludes("--max");
  search_cmd->add_option("--parallel,-j", se.parallel, "Trials at a time (the cores are divided)")
      ->check(CLI::Range(1, 256));
  search_cmd
      ->add_option("--rung", se.rung,
                   "The first rung's steps (default: budget / eta^2); pbt: the interval (default: budget / 10)")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 50));
  search_cmd->add_option("--eta", se.eta, "The halving factor: the top 1/eta of a rung go on (default 3)")
      ->check(CLI::Range(int64_t(2), int64_t(1000)));
  search_cmd->add_option("--seed", se.seed, "The sampler's seed (default 0)");
  search_cmd
      ->add_option("--lease", se.lease_s,
                   "Seconds after which a worker that stopped renewing its lease is gone and another takes "
                   "its trials (default 60; renewed every lease/6)")
      ->check(CLI::Range(1.0, 86400.0));
  search_cmd->add_flag("--summary", se.summary_only, "Only print the leaderboard of what has run");
  search_cmd
      ->add_option("--submit", se.submit_workers,
                   "Submit the search as a SLURM array of this many workers (slurm.array_parallel at once), "
                   "each taking trials from the journal; nothing runs here")
      ->check(CLI::Range(1, 100000));
  search_cmd->add_flag("--dry-run", se.dry_run, "With --submit: print the sbatch script");
  search_cmd->add_flag("--wait", se.wait, "With --submit: sbatch --wait, exit with the array's status");
  return search_cmd;
}

// `gantry launch -n N`: the config checked once here (not N times in the
// ranks), then the ranks started.
int launch_command(int nproc, const std::string& config, const std::vector<std::string>& overrides) {
  const engine::JobSettings job = engine::load_job(config, overrides);
  if (job.num_nodes != 1)
    throw ConfigError(job.where("trainer.num_nodes") +
                      ": gantry launch runs ranks on this node only, "
                      "but trainer.num_nodes is " +
                      std::to_string(job.num_nodes) + " (use gantry submit for several nodes)");
  // Once here, not one line from each of N ranks (that the first to fail cut short).
  if (const std::string short_of = engine::file_limit_for_ranks(nproc); !short_of.empty())
    throw Error("gantry launch -n " + std::to_string(nproc) + ": " + short_of);
  LaunchOptions lo;
  lo.gantry_exe = boost::dll::program_location().string();
  // A CPU job's ranks are forked from here without exec and share this
  // process's LibTorch pages (docs/scaling.md). A CUDA job's exec: this
  // process never initializes CUDA, so a fork would be allowed, but that
  // has not run on a GPU yet.
  if (!job.cuda)
    lo.train_in_child = [](const std::string& cfg, const std::vector<std::string>& args) {
      return engine::run_command([&] { return engine::train(cfg, args); });
    };
  return launch(nproc, config, overrides, lo);
}

}  // namespace

int main(int argc, char** argv) {
  engine::prepare_process();
  CLI::App app{"gantry: train LibTorch systems from plugins (PyTorch Lightning for C++)"};
  app.set_version_flag("--version", version_text());
  app.require_subcommand(1);

  std::string config;
  std::vector<std::string> overrides;
  auto* train = app.add_subcommand("train", "Train an experiment");
  train->add_option("config", config, "Experiment YAML (configs/)")->required();
  train->add_option("overrides", overrides, "Overrides: key=value (trainer.max_steps=100)");

  int nproc = 2;
  auto* launch_cmd = app.add_subcommand("launch", "Train with N local processes (data-parallel), like torchrun");
  launch_cmd->add_option("-n,--nproc", nproc, "Number of ranks")->check(CLI::Range(1, 1024));
  launch_cmd->add_option("config", config, "Experiment YAML")->required();
  launch_cmd->add_option("overrides", overrides, "Overrides: key=value");

  bool dry_run = false, wait = false;
  auto* submit_cmd = app.add_subcommand("submit", "Render the sbatch script (slurm/) for a config and sbatch it");
  submit_cmd->add_option("config", config, "Experiment YAML")->required();
  submit_cmd->add_option("overrides", overrides, "Overrides: key=value");
  submit_cmd->add_flag("--dry-run", dry_run, "Print the script instead of submitting it");
  submit_cmd->add_flag("--wait", wait, "sbatch --wait: block until the job ends, exit with its status");
  bool submit_sweep = false;
  submit_cmd->add_flag("--sweep", submit_sweep,
                       "The overrides are a grid (key=a,b,c): one SLURM job array, a task per point "
                       "(slurm.array_parallel at once)");

  SweepOptions so;
  auto* sweep_cmd = app.add_subcommand(
      "sweep", "Train the grid of overrides (key=a,b,c is an axis), N points at a time; rerun to resume");
  sweep_cmd->add_option("config", config, "Experiment YAML")->required();
  sweep_cmd->add_option("overrides", overrides, "key=value (every point) or key=a,b,c (an axis)");
  sweep_cmd->add_option("--parallel,-j", so.parallel, "Points at a time (the cores are divided)")
      ->check(CLI::Range(1, 256));
  sweep_cmd->add_option("--metric", so.metric, "The metric the summary ranks by (default: the first logged)");
  sweep_cmd->add_flag("--max", so.maximize, "Best = largest final value (default: smallest)");
  sweep_cmd->add_flag("--summary", so.summary_only, "Only print the table of what has run (e.g. after an array job)");
  sweep_cmd->add_flag("--array-task", so.array_task,
                      "Run only point SLURM_ARRAY_TASK_ID (the command gantry submit --sweep writes)");

  search::SearchOptions se;
  bool smaller =
      false;  // --min: the default, said for symmetry with --max (a flag needs a variable under C++20's CLI11)
  auto* search_cmd = add_search(app, config, overrides, se, smaller);

  auto* validate = app.add_subcommand("validate", "Check a config, its plugin and data without training");
  validate->add_option("config", config, "Experiment YAML")->required();
  validate->add_option("overrides", overrides, "Overrides: key=value");

  auto* plugins = app.add_subcommand("plugins", "List plugins found, with their manifests");
  auto* keys = app.add_subcommand("keys", "List every config key: its values, default and meaning (Markdown)");

  engine::SampleOptions sa;
  auto* sample = app.add_subcommand("sample", "Generate samples from a checkpoint as a PNG grid");
  sample->add_option("--checkpoint,-c", sa.checkpoint, "Checkpoint file")->required();
  sample->add_option("-n", sa.n, "Number of samples")->check(CLI::Range(1, 4096));
  sample->add_option("-o,--output", sa.output, "Output PNG");
  sample->add_option("--seed", sa.seed, "Seed for the sample inputs");
  sample->add_option("--tensors", sa.tensors, "Also save the inputs and outputs as tensors (torch.load-able)");
  sample->add_option("--plugin", sa.plugin,
                     "The plugin (path or name) instead of the one the checkpoint recorded (a moved build directory)");
  sample
      ->add_option("--labels", sa.labels,
                   "A conditional system's classes, e.g. 0,1,2: sample i is of class labels[i % count] (with count "
                   "images a row, one class a column)")
      ->delimiter(',')
      ->check(CLI::NonNegativeNumber);
  sample
      ->add_option("--rows", sa.rows,
                   "Rows of the grid (default: the run's trainer.grid_rows; 0 there: 8 images a row)")
      ->check(CLI::Range(1, 4096));

  engine::ServeOptions sv;
  auto* serve = app.add_subcommand("serve", "Serve a trained system over HTTP: noise in, images out (docs/serve.md)");
  serve->add_option("checkpoint", sv.checkpoint, "A checkpoint, or a run or experiment directory")->required();
  serve->add_option("--host", sv.host, "Address to bind (default 127.0.0.1)");
  serve->add_option("--token", sv.token, "Require Authorization: Bearer TOKEN");
  serve->add_option("--plugin", sv.plugin, "The plugin (path or name) instead of the recorded one");
  serve->add_flag("--watch", sv.watch, "Swap in a newer checkpoint of the run or experiment directory as it appears");
  for (const engine::ServeOption& so : engine::serve_options())  // declared once, with their bounds
    serve->add_option(so.flag, sv.*so.field, so.help)->check(CLI::Range(so.min, so.max));

  CLI11_PARSE(app, argc, argv);
  return engine::run_command([&]() -> int {
    if (*train) return engine::train(config, overrides);
    if (*launch_cmd) return launch_command(nproc, config, overrides);
    if (*validate) return engine::validate(config, overrides);
    if (*sweep_cmd) {
      so.gantry_exe = boost::dll::program_location().string();
      return sweep(config, overrides, so);
    }
    if (*search_cmd) {
      se.gantry_exe = boost::dll::program_location().string();
      return run_search(config, overrides, se);
    }
    if (*submit_cmd)
      return submit(config, overrides, dry_run, wait, boost::dll::program_location().string(), submit_sweep);
    if (*plugins) return engine::list_plugins();
    if (*keys) {
      std::fputs(engine::keys_table().c_str(), stdout);
      return 0;
    }
    if (*sample) return engine::sample(sa);
    if (*serve) return engine::serve(sv);
    return 0;
  });
}
