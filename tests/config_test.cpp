// Experiment configs: the demo loads, and each kind of bad input is one error
// naming the key, where it was set and what was expected.
#include "config.hpp"
#include "errors.hpp"
#include "support.hpp"
#include "trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;
using gantry::test::config_error;
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
  EXPECT_NE(config_error([&] { ExperimentConfig::load(path); }).find("data.batch_size must be > 0"),
            std::string::npos);
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
  EXPECT_NE(msg.find("trainer.weight_layout must be auto or as_built, got 'rows'"), std::string::npos) << msg;
  msg = config_error([&] { ExperimentConfig::load(path, {"trainer.step_in_backward=maybe"}); });
  EXPECT_NE(msg.find("trainer.step_in_backward must be true or false, got 'maybe'"), std::string::npos) << msg;
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
  EXPECT_NE(config_error([] { ExperimentConfig::load("/nonexistent/exp.yaml"); })
                .find("/nonexistent/exp.yaml: cannot open"),
            std::string::npos);
}

TEST(Config, RunThatNeverEndsIsRejected) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\ntrainer:\n  max_epochs: -1\n");
  EXPECT_NE(config_error([&] { ExperimentConfig::load(path); }).find("never end"), std::string::npos);
}

TEST(Config, UnknownSystemKeyIsReportedForThePlugin) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\nsystem:\n  plugin: " + gantry::test::gan_plugin_path() +
                                          "\n  lr: 0.001\n  latnet_dim: 10\n");
  const auto cfg = ExperimentConfig::load(path);
  const auto msg = config_error([&] { Experiment::build(cfg); });
  EXPECT_NE(msg.find(path + ":5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'system.latnet_dim' for plugin gan"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'system.latent_dim'"), std::string::npos) << msg;
}

TEST(Config, SystemKeyOfWrongTypeNamesIt) {
  TempDir dir;
  const auto path = write_config(dir, "name: a\nsystem:\n  plugin: " + gantry::test::gan_plugin_path() +
                                          "\n  latent_dim: big\n");
  const auto msg = config_error([&] { Experiment::build(ExperimentConfig::load(path)); });
  EXPECT_NE(msg.find(path + ":4: system.latent_dim must be an integer, got 'big'"), std::string::npos)
      << msg;
}

TEST(Config, NearestKey) {
  EXPECT_EQ(nearest_key("trainer.max_epoch", {"trainer.max_epochs", "trainer.max_steps"}),
            "trainer.max_epochs");
  EXPECT_EQ(nearest_key("completely_different", {"trainer.max_epochs"}), "");
}
