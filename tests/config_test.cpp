// Experiment configs: the demo loads, and each kind of bad input is one error
// naming the key, where it was set and what was expected.
#include <algorithm>

#include "config/config.hpp"
#include "gantry/errors.hpp"
#include "support.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::config_error;
using gantry::test::TempDir;
using gantry::test::write_text;

namespace {

std::string write_config(const TempDir& dir, const std::string& text) {
  const std::string path = dir / "exp.yaml";
  write_text(path, text);
  return path;
}

}  // namespace

TEST(Config, DemoConfigLoadsWithItsValues) {
  const auto cfg = ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"));
  EXPECT_EQ(cfg.name, "gan_fashion_mnist");
  EXPECT_EQ(cfg.system.plugin, "gan");
  EXPECT_EQ(cfg.data.batch_size, 64);
  EXPECT_EQ(cfg.trainer.seed, 42);
  EXPECT_DOUBLE_EQ(cfg.system_params["lr"].as<double>(), 0.0002);
}

TEST(Config, OverridesWinAndAreTyped) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer:\n  max_steps: 10\n");
  const auto cfg = ExperimentConfig::load(
      path, {"trainer.max_steps=25", "data.batch_size=8", "system.lr=0.5", "trainer.max_time=00:01:00"});
  EXPECT_EQ(cfg.trainer.max_steps, 25);
  EXPECT_EQ(cfg.data.batch_size, 8);
  EXPECT_DOUBLE_EQ(cfg.system_params["lr"].as<double>(), 0.5);
  EXPECT_DOUBLE_EQ(cfg.trainer.max_time_seconds(), 60.0);
  EXPECT_NE(cfg.to_yaml().find("max_steps: 25"), std::string::npos);
}

TEST(Config, UnknownKeyNamesFileLineAndNearestKey) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer:\n  max_steps: 10\n  max_stesp: 5\n");
  const auto msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_NE(msg.find(path + ":4"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'trainer.max_stesp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'trainer.max_steps'"), std::string::npos) << msg;
}

// A Lightning user's names (issue 47.4): the Trainer's and the callbacks'
// arguments that gantry spells otherwise name gantry's key, from a file (with
// its line) and from the command line; a LightningCLI callback section points
// at gantry's section; every key a hint names is a real one.
TEST(Config, LightningNamesNameTheGantryKey) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"trainer.check_val_every_n_epoch=1", "trainer.val_every_n_epochs"},
      {"trainer.val_check_interval=100", "trainer.val_every_n_steps"},
      {"trainer.default_root_dir=x", "trainer.out_dir"},
      {"trainer.enable_progress_bar=false", "trainer.progress"},
      {"checkpoint.every_n_train_steps=100", "checkpoint.every_n_steps"},
      {"checkpoint.train_time_interval=10", "checkpoint.every_n_minutes"},
      {"ModelCheckpoint.every_n_train_steps=100", "checkpoint.every_n_steps"},
  };
  for (const auto& [arg, key] : cases) {
    const auto msg = config_error([&] { ExperimentConfig::load(gantry::test::kDemo, {arg}); });
    EXPECT_NE(msg.find("that is Lightning's name: gantry's key is '" + key + "'"), std::string::npos) << msg;
    EXPECT_EQ(config_error([&] { ExperimentConfig::load(gantry::test::kDemo, {key + "=1"}); }).find("unknown key"),
              std::string::npos)
        << key << " is not a gantry key";
  }
  auto msg = config_error([&] { ExperimentConfig::load(gantry::test::kDemo, {"EarlyStopping.patience=3"}); });
  EXPECT_NE(msg.find("Lightning's callback arguments are gantry keys under early_stopping (try "
                     "'early_stopping.patience')"),
            std::string::npos)
      << msg;
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer:\n  check_val_every_n_epoch: 1\n");
  msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_NE(msg.find(path + ":3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("gantry's key is 'trainer.val_every_n_epochs'"), std::string::npos) << msg;
}

TEST(Config, UnknownSectionKeySuggestsTheSection) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\nbatch_size: 3\n");
  const auto msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_NE(msg.find("did you mean 'data.batch_size'"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesExpectedType) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ndata:\n  batch_size: lots\n");
  const auto msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_NE(msg.find(path + ":3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.batch_size must be an integer, got 'lots'"), std::string::npos) << msg;
}

TEST(Config, OutOfRangeValueIsRejected) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ndata:\n  batch_size: 0\n");
  EXPECT_NE(config_error([&] { ExperimentConfig::load(path); }).find("data.batch_size must be > 0"), std::string::npos);
  EXPECT_NE(config_error([&] {
              ExperimentConfig::load(path, {"data.batch_size=4", "trainer.accelerator=tpu"});
            }).find("one of cpu, cuda, auto"),
            std::string::npos);
  EXPECT_NE(config_error([&] {
              ExperimentConfig::load(path, {"data.batch_size=4", "trainer.max_time=soon"});
            }).find("trainer.max_time"),
            std::string::npos);
}

TEST(Config, BadOverridesAreCheckedLikeTheFile) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\n");
  auto msg = config_error([&] { ExperimentConfig::load(path, {"trainer.max_step=5"}); });
  EXPECT_NE(msg.find("command line 'trainer.max_step=5'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'trainer.max_steps'"), std::string::npos) << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"trainer.seed=abc"}); });
  EXPECT_NE(msg.find("trainer.seed must be an integer, got 'abc'"), std::string::npos) << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"trainer.weight_layout=rows"}); });
  EXPECT_NE(msg.find("trainer.weight_layout must be one of auto, as_built, got 'rows'"), std::string::npos) << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"trainer.step_in_backward=maybe"}); });
  EXPECT_NE(msg.find("trainer.step_in_backward must be true or false, got 'maybe'"), std::string::npos) << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"data.format=jpeg"}); });
  EXPECT_NE(
      msg.find("command line 'data.format=jpeg': data.format must be one of idx, image_folder, cifar10, got 'jpeg'"),
      std::string::npos)
      << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"no_equals_sign"}); });
  EXPECT_NE(msg.find("expected key=value"), std::string::npos) << msg;
}

TEST(Config, InvalidYamlNamesTheLine) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer: [1, 2\n");
  const auto msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_NE(msg.find("invalid YAML"), std::string::npos) << msg;
}

TEST(Config, MissingFileIsOneError) {
  EXPECT_NE(
      config_error([] { ExperimentConfig::load("/nonexistent/exp.yaml"); }).find("/nonexistent/exp.yaml: cannot open"),
      std::string::npos);
}

TEST(Config, RunThatNeverEndsIsRejected) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer:\n  max_epochs: -1\n");
  EXPECT_NE(config_error([&] { ExperimentConfig::load(path); }).find("never end"), std::string::npos);
}

TEST(Config, MaxStepsAloneIsNotCutByTheDefaultEpochCount) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\n");
  EXPECT_EQ(ExperimentConfig::load(path).trainer.max_epochs, 1);
  EXPECT_EQ(ExperimentConfig::load(path, {"trainer.max_steps=5000"}).trainer.max_epochs, -1);
  EXPECT_EQ(ExperimentConfig::load(path, {"trainer.max_time=00:01:00"}).trainer.max_epochs, -1);
  // Given explicitly, both limits hold (the first reached ends the run).
  EXPECT_EQ(ExperimentConfig::load(path, {"trainer.max_steps=5000", "trainer.max_epochs=2"}).trainer.max_epochs, 2);
  const auto both = write_config(dir, "name: a\ntrainer:\n  max_epochs: 3\n  max_steps: 10\n");
  EXPECT_EQ(ExperimentConfig::load(both).trainer.max_epochs, 3);
}

TEST(Config, UnknownSystemKeyIsReportedForThePlugin) {
  TempDir dir;
  const auto path = write_config(
      dir, "name: a\nsystem:\n  plugin: " + gantry::test::gan_plugin_path() + "\n  lr: 0.001\n  latnet_dim: 10\n");
  const auto cfg = ExperimentConfig::load(path);
  const auto msg = config_error([&] { Experiment::build(cfg); });
  EXPECT_NE(msg.find(path + ":5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'system.latnet_dim' for plugin gan"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'system.latent_dim'"), std::string::npos) << msg;
}

TEST(Config, SystemKeyOfWrongTypeNamesIt) {
  TempDir dir;
  const auto path =
      write_config(dir, "name: a\nsystem:\n  plugin: " + gantry::test::gan_plugin_path() + "\n  latent_dim: big\n");
  const auto msg = config_error([&] { Experiment::build(ExperimentConfig::load(path)); });
  EXPECT_NE(msg.find(path + ":4: system.latent_dim must be an integer, got 'big'"), std::string::npos) << msg;
}

TEST(Config, NearestKey) {
  EXPECT_EQ(nearest_key("trainer.max_epoch", {"trainer.max_epochs", "trainer.max_steps"}), "trainer.max_epochs");
  EXPECT_EQ(nearest_key("completely_different", {"trainer.max_epochs"}), "");
}

TEST(Config, AnAliasBombIsRefusedAtOnce) {
  // ~1 KB: ten levels of ten aliases of the level below, 10^10 nodes if expanded.
  std::string text = "name: a\nsystem:\n  l0: &l0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    text += "  l" + std::to_string(i) + ": &l" + std::to_string(i) + " [";
    for (int j = 0; j < 10; ++j) text += std::string(j ? ", " : "") + "*l" + std::to_string(i - 1);
    text += "]\n";
  }
  ASSERT_LT(text.size(), 1200u);
  TempDir dir;
  const auto path = write_config(dir, text);
  const auto start = std::chrono::steady_clock::now();
  const auto msg = config_error([&] { ExperimentConfig::load(path); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
  EXPECT_NE(msg.find(path + ": the YAML expands to more than 100000 nodes"), std::string::npos) << msg;
  // The same in an override's value.
  std::string value = "{a: &a [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]";
  for (char c = 'b'; c < 'k'; ++c) {
    value += std::string(", ") + c + ": &" + c + " [";
    for (int j = 0; j < 10; ++j) value += std::string(j ? ", " : "") + "*" + char(c - 1);
    value += "]";
  }
  value += "}";
  EXPECT_NE(config_error([&] {
              ExperimentConfig::load(write_config(dir, "name: a\n"), {"system.x=" + value});
            }).find("expands to more than"),
            std::string::npos);
  // Anchors and aliases of reasonable size still work.
  const auto ok = ExperimentConfig::load(write_config(dir, "name: a\nsystem:\n  d: &d [128, 256]\n  g: *d\n"));
  EXPECT_EQ(ok.system_params["g"].size(), 2u);
}

TEST(Config, WhatWouldBeSilentlyIgnoredIsOneError) {
  TempDir dir;
  auto load = [&](const std::string& text, std::vector<std::string> overrides = {}) {
    return config_error([&] { ExperimentConfig::load(write_config(dir, text), overrides); });
  };
  // A key twice (the last would win), in a section and at the top.
  auto msg = load("name: a\ntrainer:\n  max_steps: 10\n  max_steps: 20\n");
  EXPECT_NE(msg.find("exp.yaml:4: key 'max_steps' appears twice in one mapping (first at line 3)"), std::string::npos)
      << msg;
  msg = load("name: a\ntrainer:\n  max_steps: 10\ndata:\n  batch_size: 8\ntrainer:\n  seed: 1\n");
  EXPECT_NE(msg.find("exp.yaml:6: key 'trainer' appears twice"), std::string::npos) << msg;
  // A mapping where a value belongs; an empty section is fine.
  msg = load("name: a\ntrainer:\n  max_steps: {}\n");
  EXPECT_NE(msg.find("trainer.max_steps must be an integer, got '{}'"), std::string::npos) << msg;
  EXPECT_NO_THROW(ExperimentConfig::load(write_config(dir, "name: a\ntrainer: {}\ncheckpoint: {}\n")));
  // A second document.
  msg = load("name: a\n---\nname: b\n");
  EXPECT_NE(msg.find("a second YAML document"), std::string::npos) << msg;
  // Unquoted yes/no/on/off where a string belongs; quoted, it is the text.
  msg = load("name: a\nmonitor:\n  host: Off\n");
  EXPECT_NE(msg.find("exp.yaml:3: monitor.host must be a string"), std::string::npos) << msg;
  EXPECT_NE(load("name: a\nslurm:\n  partition: yes\n").find("slurm.partition must be a string"), std::string::npos);
  EXPECT_EQ(ExperimentConfig::load(write_config(dir, "name: a\nslurm:\n  partition: 'yes'\n")).slurm.partition, "yes");
  // Values train or submit would trip on later.
  EXPECT_NE(load("name: a\nmonitor:\n  host: example\n").find("monitor.host must be an IP address"), std::string::npos);
  EXPECT_NE(load("name: a\n", {"monitor.host=Off"}).find("monitor.host must be a string"), std::string::npos);
  EXPECT_NE(load("name: a\nslurm:\n  time: soon\n").find("slurm.time must be a SLURM time limit"), std::string::npos);
  EXPECT_NE(load("name: a\nslurm:\n  mem: [1]\n").find("slurm.mem must be a string"), std::string::npos);
  EXPECT_NE(load("name: a\nslurm:\n  mem: lots\n").find("slurm.mem must be a SLURM memory size"), std::string::npos);
  EXPECT_NE(load("name: a\nslurm:\n  signal: 'USR1 now'\n").find("slurm.signal must be"), std::string::npos);
  EXPECT_NE(load("name: a\nslurm:\n  partition: 'a b'\n").find("slurm.partition must be"), std::string::npos);
  EXPECT_NE(load("name: a\n", {"trainer.dist_timeout=.inf"}).find("trainer.dist_timeout must be a finite number"),
            std::string::npos);
  EXPECT_NE(load("name: " + std::string(1 << 20, 'n') + "\n").find("name must be a directory name"), std::string::npos);
  for (const char* t : {"90", "1-00:00:00", "00:30:00", "2-12"})
    EXPECT_EQ(
        ExperimentConfig::load(write_config(dir, std::string("name: a\nslurm:\n  time: '") + t + "'\n")).slurm.time, t);
}

TEST(Config, ANonFiniteSystemNumberNamesTheKey) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\nsystem:\n  plugin: " + gantry::test::gan_plugin_path() + "\n");
  const auto msg = config_error([&] { Experiment::build(ExperimentConfig::load(path, {"system.lr=.inf"})); });
  EXPECT_NE(msg.find("system.lr must be a finite number, got '.inf'"), std::string::npos) << msg;
}

// Each key is declared once (config.hpp's GANTRY_KEYS_* lists); the README's
// table is what `gantry keys` prints from them, word for word.
TEST(Config, TheReadmeKeyTableIsTheDeclarations) {
  const std::string readme = gantry::test::read_text(gantry::test::source_path("README.md"));
  const std::string begin = "<!-- keys: begin (gantry keys) -->\n", end = "<!-- keys: end -->";
  const size_t a = readme.find(begin), b = readme.find(end);
  ASSERT_NE(a, std::string::npos);
  ASSERT_NE(b, std::string::npos);
  const std::string table = readme.substr(a + begin.size(), b - a - begin.size());
  EXPECT_EQ(table, config_keys_markdown()) << "regenerate the README's table with `gantry keys`";
  const auto r = gantry::test::run_gantry("keys");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, config_keys_markdown());
  // Every key the schema reads is in the table, one row each.
  size_t rows = 0;
  for (const KeyDoc& k : config_keys()) {
    ++rows;
    EXPECT_NE(table.find("| `" + k.key + "` | " + k.type + " | "), std::string::npos) << k.key;
  }
  EXPECT_EQ(rows + 2, size_t(std::count(table.begin(), table.end(), '\n')));
  EXPECT_GE(rows, 60u);
}

// A choice is parsed once into its enum; config.yaml writes it back as its
// name, and a name it lacks is one line listing the choices.
TEST(Config, ChoicesAreParsedOnceIntoEnums) {
  const auto cfg = ExperimentConfig::load(
      gantry::test::kDemo, {"trainer.accelerator=auto", "trainer.precision=bf16-mixed", "data.format=cifar10",
                            "optimizers.g.scheduler=cosine", "optimizers.g.interval=epoch", "trainer.progress=none"});
  EXPECT_EQ(cfg.trainer.accelerator, AcceleratorKind::kAuto);
  EXPECT_EQ(cfg.trainer.precision, PrecisionMode::kBf16Mixed);
  EXPECT_EQ(cfg.data.format, DataFormat::kCifar10);
  EXPECT_EQ(cfg.data.train_prefix, "data_batch");  // the format's own split names
  EXPECT_EQ(cfg.optimizers.at("g").scheduler, SchedulerKind::kCosine);
  EXPECT_EQ(cfg.optimizer("g").interval, ScheduleInterval::kEpoch);
  EXPECT_EQ(cfg.trainer.progress, ProgressMode::kNone);
  const auto again = ExperimentConfig::parse(cfg.to_yaml(), "config.yaml");
  EXPECT_EQ(again.to_yaml(), cfg.to_yaml());
  EXPECT_EQ(again.trainer.precision, PrecisionMode::kBf16Mixed);
  EXPECT_NE(cfg.to_yaml().find("precision: bf16-mixed"), std::string::npos) << cfg.to_yaml();
  const std::string msg = config_error([] { ExperimentConfig::load(gantry::test::kDemo, {"trainer.progress=fancy"}); });
  EXPECT_NE(msg.find("command line 'trainer.progress=fancy': trainer.progress must be one of auto, bar, lines, none, "
                     "got 'fancy'"),
            std::string::npos)
      << msg;
  const std::string opt =
      config_error([] { ExperimentConfig::load(gantry::test::kDemo, {"optimizers.d.interval=batch"}); });
  EXPECT_NE(opt.find("optimizers.d.interval must be one of step, epoch, got 'batch'"), std::string::npos) << opt;
}

// Lightning's batch counts: a whole number counts batches, a number with a
// point is a fraction of the epoch's, fast_dev_run also takes true/false;
// each round-trips through config.yaml, and a wrong one is one line.
TEST(Config, BatchCountsAreCountsOrFractionsAsLightningWritesThem) {
  const auto cfg = ExperimentConfig::load(
      gantry::test::kDemo,
      {"trainer.limit_train_batches=10", "trainer.limit_val_batches=0.25", "trainer.fast_dev_run=true",
       "trainer.overfit_batches=1.0", "trainer.accumulate_grad_batches=4", "optimizers.d.accumulate_grad_batches=2"});
  EXPECT_EQ(cfg.trainer.limit_train_batches.count, 10);
  EXPECT_EQ(cfg.trainer.limit_train_batches.of(7), 7);
  EXPECT_TRUE(cfg.trainer.limit_val_batches.is_fraction());
  EXPECT_EQ(cfg.trainer.limit_val_batches.of(10), 2) << "a quarter of 10, rounded down";
  EXPECT_EQ(cfg.trainer.limit_val_batches.of(3), 1) << "a fraction > 0 is at least one batch";
  EXPECT_EQ(cfg.trainer.fast_dev_run.count, 1);
  EXPECT_TRUE(cfg.trainer.overfit_batches.all()) << "1.0 is every batch, 1 would be one";
  EXPECT_EQ(cfg.optimizer("g").accumulate_grad_batches, 4) << "the trainer's";
  EXPECT_EQ(cfg.optimizer("d").accumulate_grad_batches, 2) << "its own section's";
  const auto again = ExperimentConfig::parse(cfg.to_yaml(), "config.yaml");
  EXPECT_EQ(again.to_yaml(), cfg.to_yaml());
  EXPECT_TRUE(again.trainer.overfit_batches.all());
  EXPECT_EQ(again.trainer.fast_dev_run.count, 1);
  EXPECT_EQ(again.trainer.limit_val_batches.of(10), 2);
  const auto defaults = ExperimentConfig::load(gantry::test::kDemo, {});
  EXPECT_TRUE(defaults.trainer.limit_train_batches.all());
  EXPECT_TRUE(defaults.trainer.overfit_batches.none());
  EXPECT_EQ(defaults.trainer.fast_dev_run.count, 0);
  // limit_val_batches=0: no validation even when asked for.
  EXPECT_TRUE(ExperimentConfig::load(gantry::test::kDemo, {"trainer.val_every_n_epochs=1"}).trainer.validates());
  EXPECT_FALSE(
      ExperimentConfig::load(gantry::test::kDemo, {"trainer.val_every_n_epochs=1", "trainer.limit_val_batches=0"})
          .trainer.validates());
  for (const auto& [override, expected] : std::vector<std::pair<std::string, std::string>>{
           {"trainer.limit_train_batches=1.5",
            "trainer.limit_train_batches must be a count > 0 or a fraction in (0, 1]"},
           {"trainer.limit_train_batches=0", "trainer.limit_train_batches must be a count > 0 or a fraction in (0, 1]"},
           {"trainer.limit_val_batches=true", "trainer.limit_val_batches must be a count >= 0 or a fraction in [0, 1]"},
           {"trainer.fast_dev_run=0.5", "trainer.fast_dev_run must be true, false or a count"},
           {"trainer.limit_train_batches=-3",
            "trainer.limit_train_batches must be a count of batches (10) or a "
            "fraction of them (0.25), got '-3'"},
           {"trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches must be > 0"},
       }) {
    const std::string msg = config_error([&] { ExperimentConfig::load(gantry::test::kDemo, {override}); });
    EXPECT_NE(msg.find(expected), std::string::npos) << override << ": " << msg;
  }
}
