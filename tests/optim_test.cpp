// Around the optimizer step: gradient clipping (after the DDP average, before
// the step) and learning-rate schedules (a function of the step, exact across
// a resume, logged as lr-<name>), from `optimizers.<name>.*` in the config.
#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <map>

#include "gantry/errors.hpp"
#include "data/idx_dataset.hpp"
#include "support.hpp"
#include "optim/lr_schedule.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;

namespace {

ExperimentConfig tiny_config(const std::vector<std::string>& overrides) {
  std::vector<std::string> o = {"system.plugin=" + gantry::test::plugin_path("tiny"), "trainer.progress=none",
                                "trainer.weight_layout=as_built"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return ExperimentConfig::load(gantry::test::source_path("tests/sdk_plugin/tiny.yaml"), o);
}

// The tiny plugin's parameters before and after `steps` SGD steps at lr 1.
std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>> one_run(const std::vector<std::string>& extra) {
  std::vector<std::string> o = {"system.lr=1.0", "trainer.max_steps=1"};
  o.insert(o.end(), extra.begin(), extra.end());
  Experiment exp = Experiment::build(tiny_config(o));
  auto modules = exp.system->modules();
  std::vector<torch::Tensor> before, after;
  for (const auto& p : modules[0].module->parameters()) before.push_back(p.detach().clone());
  TempDir dir;
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  exp.use_images(data);
  Trainer(std::move(exp), dir.path().string()).fit();
  for (const auto& p : modules[0].module->parameters()) after.push_back(p.detach().clone());
  return {before, after};
}

double update_norm(const std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>& r) {
  double sq = 0;
  for (size_t i = 0; i < r.first.size(); ++i) sq += (r.second[i] - r.first[i]).pow(2).sum().item<double>();
  return std::sqrt(sq);
}

double update_max(const std::pair<std::vector<torch::Tensor>, std::vector<torch::Tensor>>& r) {
  double m = 0;
  for (size_t i = 0; i < r.first.size(); ++i) m = std::max(m, (r.second[i] - r.first[i]).abs().max().item<double>());
  return m;
}

std::string config_error(const std::vector<std::string>& overrides) {
  try {
    static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
    Experiment exp = Experiment::build(tiny_config(overrides), data);
    TempDir dir;
    Trainer trainer(std::move(exp), dir.path().string());
    trainer.fit();  // some are known only with the data (the run's length)
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(LrSchedule, WarmupStepCosineAndLinearFollowTheirFormulas) {
  OptimizerOptions o;
  o.warmup = 4;
  o.scheduler = SchedulerKind::kStep;
  o.step_size = 10;
  o.gamma = 0.5;
  const LrSchedule step(o, {0.2}, -1, "x");
  EXPECT_DOUBLE_EQ(step.lr(0, 0), 0.05);  // warm-up: (t+1)/4 of the base
  EXPECT_DOUBLE_EQ(step.lr(0, 3), 0.2);
  EXPECT_DOUBLE_EQ(step.lr(0, 13), 0.2);  // 9 intervals after warm-up
  EXPECT_DOUBLE_EQ(step.lr(0, 14), 0.1);
  EXPECT_DOUBLE_EQ(step.lr(0, 34), 0.025);
  o.scheduler = SchedulerKind::kCosine;
  o.min_lr = 0.01;
  const LrSchedule cosine(o, {0.2, 0.4}, 104, "x");
  EXPECT_DOUBLE_EQ(cosine.lr(0, 4), 0.2);
  EXPECT_NEAR(cosine.lr(0, 54), (0.2 + 0.01) / 2, 1e-15);  // half-way
  EXPECT_NEAR(cosine.lr(1, 54), (0.4 + 0.01) / 2, 1e-15);  // each group from its own base
  EXPECT_DOUBLE_EQ(cosine.lr(0, 104), 0.01);
  EXPECT_DOUBLE_EQ(cosine.lr(0, 500), 0.01);  // past the end: min_lr
  o.scheduler = SchedulerKind::kLinear;
  const LrSchedule linear(o, {0.2}, 104, "x");
  EXPECT_NEAR(linear.lr(0, 29), 0.2 - 0.19 * 0.25, 1e-15);
  // A length-bound schedule without a length is one error naming where.
  o.scheduler = SchedulerKind::kCosine;
  try {
    LrSchedule(o, {0.1}, -1, "exp.yaml:7: optimizers.g");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("exp.yaml:7: optimizers.g: scheduler cosine needs the run's length"),
              std::string::npos)
        << e.what();
  }
}

TEST(Optim, ClippingBoundsTheStep) {
  // SGD at lr 1: the update is the (clipped) gradient itself.
  const double free = update_norm(one_run({}));
  ASSERT_GT(free, 0.1);
  const auto by_norm = one_run({"optimizers.sgd.gradient_clip_val=0.001"});
  EXPECT_NEAR(update_norm(by_norm), 0.001, 1e-6);
  // The trainer-wide default (Lightning's key) applies to every optimizer; by value.
  const auto by_value = one_run({"trainer.gradient_clip_val=0.0001", "trainer.gradient_clip_algorithm=value"});
  // Float32 parameters of magnitude < 0.04 (784 inputs): theta - (theta - 1e-4)
  // is 1e-4 within an ulp of theta, 3.7e-9.
  EXPECT_NEAR(update_max(by_value), 0.0001, 1e-8);
  EXPECT_LT(update_norm(by_value), free);
}

TEST(Optim, OptimizerKeysAreChecked) {
  EXPECT_NE(config_error({"optimizers.adam.scheduler=cosine"})
                .find("optimizers.adam: plugin tiny has no optimizer 'adam'; configure_optimizers() returned: sgd"),
            std::string::npos);
  EXPECT_NE(config_error({"optimizers.sgd.shceduler=cosine"}).find("did you mean 'optimizers.sgd.scheduler'"),
            std::string::npos);
  EXPECT_NE(config_error({"optimizers.sgd.scheduler=cosin"})
                .find("optimizers.sgd.scheduler must be one of none, step, cosine, linear, got 'cosin'"),
            std::string::npos);
  EXPECT_NE(config_error({"optimizers.scheduler=cosine"}).find("is not optimizers.<optimizer>.<key>"),
            std::string::npos);
  EXPECT_NE(config_error({"optimizers.sgd.scheduler=cosine", "trainer.max_steps=-1", "trainer.max_time=60"})
                .find("scheduler cosine needs the run's length"),
            std::string::npos);
}

TEST(Optim, AScheduledLrIsLoggedAndResumesBitIdentically) {
  // The GAN's two Adams, each with a schedule: 10 steps straight vs 5 + a
  // resume to 10 (the scheduled lr is a function of the step; the base lrs
  // travel in the checkpoint).
  TempDir straight, second;
  const auto data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  auto gan = [&](std::vector<std::string> extra) {
    std::vector<std::string> o = {"system.plugin=" + gantry::test::gan_plugin_path(),
                                  "trainer.progress=none",
                                  "trainer.image_every_n_steps=0",
                                  "data.batch_size=16",
                                  "trainer.log_every_n_steps=1",
                                  "optimizers.g.scheduler=cosine",
                                  "optimizers.g.warmup=3",
                                  "optimizers.d.scheduler=step",
                                  "optimizers.d.step_size=4",
                                  "optimizers.d.gamma=0.5",
                                  "optimizers.d.gradient_clip_val=0.5"};
    o.insert(o.end(), extra.begin(), extra.end());
    return Experiment::build(ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"), o),
                             data);
  };
  // Both runs are 10 steps long (a cosine's shape depends on the length): the
  // second resumes from the first's step-5 checkpoint, as after a preemption.
  const FitResult a =
      Trainer(gan({"trainer.max_steps=10", "checkpoint.every_n_steps=5"}), straight.path().string()).fit();
  const std::string at5 = (straight.path() / "checkpoints/step_0000005.ckpt").string();
  const FitResult c = Trainer(gan({"trainer.max_steps=10", "trainer.resume=" + at5}), second.path().string()).fit();
  ASSERT_EQ(c.steps_run, 5);
  EXPECT_TRUE(gantry::test::state_dict_of(at5).size() > 0);
  gantry::test::expect_same_weights(a.last_checkpoint, c.last_checkpoint);
  EXPECT_EQ(a.last_values, c.last_values);
  // lr-d in the rows: the lr of each row's (single) batch, 2e-4 halved every 4 batches.
  const auto rows = gantry::test::lines_of(gantry::test::read_text(straight.path() / "metrics.csv"));
  ASSERT_EQ(rows.size(), 11u);
  const auto header = gantry::test::split(rows[0], ',');
  const auto col = std::find(header.begin(), header.end(), "lr-d") - header.begin();
  ASSERT_LT(size_t(col), header.size()) << rows[0];
  for (int step = 1; step <= 10; ++step) {
    const double want = 2e-4 * std::pow(0.5, (step - 1) / 4);
    EXPECT_NEAR(std::stod(gantry::test::split(rows[step], ',')[col]), want, want * 1e-6) << rows[step];
  }
}

namespace {

// The column `name` of every row of `metrics_csv` (rows from 1).
std::vector<double> column_of(const std::string& metrics_csv, const std::string& name) {
  const auto rows = gantry::test::lines_of(gantry::test::read_text(metrics_csv));
  const auto header = gantry::test::split(rows.at(0), ',');
  const size_t col = std::find(header.begin(), header.end(), name) - header.begin();
  EXPECT_LT(col, header.size()) << name << " not in " << rows[0];
  std::vector<double> out;
  for (size_t r = 1; r < rows.size() && col < header.size(); ++r)
    out.push_back(std::stod(gantry::test::split(rows[r], ',')[col]));
  return out;
}

}  // namespace

TEST(Optim, APluginsOwnScheduleSetsTheLrResumesAndTheConfigReplacesIt) {
  // The tiny plugin halves its SGD's lr (0.1) every 10 batches (configure_schedulers).
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  TempDir straight, resumed, replaced;
  const std::vector<std::string> own = {"system.lr_halve_every=10", "trainer.max_steps=30",
                                        "checkpoint.every_n_steps=15"};
  const FitResult a = Trainer(Experiment::build(tiny_config(own), data), straight.path().string()).fit();
  // Each row holds the lr of its last batch: t = 9, 19, 29.
  const auto lrs = column_of(straight / "metrics.csv", "lr-sgd");
  ASSERT_EQ(lrs.size(), 3u);
  EXPECT_NEAR(lrs[0], 0.1, 1e-12);
  EXPECT_NEAR(lrs[1], 0.05, 1e-12);
  EXPECT_NEAR(lrs[2], 0.025, 1e-12);
  // Resumed at batch 15 (mid-way through the second halving): the same weights at 30.
  auto o = own;
  o.push_back("trainer.resume=" + straight / "checkpoints/step_0000015.ckpt");
  const FitResult b = Trainer(Experiment::build(tiny_config(o), data), resumed.path().string()).fit();
  EXPECT_EQ(b.steps_run, 15);
  gantry::test::expect_same_weights(a.last_checkpoint, b.last_checkpoint);
  // optimizers.sgd.scheduler in the config replaces the plugin's (step decay x0.1 every 20).
  o = own;
  o.insert(o.end(), {"optimizers.sgd.scheduler=step", "optimizers.sgd.step_size=20"});
  Trainer(Experiment::build(tiny_config(o), data), replaced.path().string()).fit();
  const auto replaced_lrs = column_of(replaced / "metrics.csv", "lr-sgd");
  ASSERT_EQ(replaced_lrs.size(), 3u);
  EXPECT_NEAR(replaced_lrs[1], 0.1, 1e-12);
  EXPECT_NEAR(replaced_lrs[2], 0.01, 1e-12);
}

TEST(Optim, APluginScheduleOfAnUnknownOptimizerIsOneLineNamingIt) {
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  TempDir dir;
  try {
    Trainer(Experiment::build(
                tiny_config({"system.lr_halve_every=10", "system.lr_schedule_of=adam", "trainer.max_steps=2"}), data),
            dir.path().string())
        .fit();
    FAIL() << "trained with a schedule for an optimizer that does not exist";
  } catch (const PluginError& e) {
    EXPECT_EQ(std::string(e.what()),
              "plugin tiny: configure_schedulers() names optimizer 'adam'; configure_optimizers() returned: sgd");
  }
}

namespace {

c10::impl::GenericDict trainer_state_of(const std::string& ckpt) {
  const auto bytes = gantry::test::read_text(ckpt);
  return torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()))
      .toGenericDict()
      .at("trainer_state")
      .toGenericDict();
}

}  // namespace

namespace {

// The EMA tests' run: 4 batches, a checkpoint after each, every one kept.
std::vector<std::string> ema_options(std::vector<std::string> o) {
  o.insert(o.end(), {"checkpoint.every_n_steps=1", "checkpoint.keep_last=0", "trainer.max_steps=4"});
  return o;
}

std::string ckpt_of(const TempDir& d, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoints/step_%07d.ckpt", step);
  return (d.path() / name).string();
}

// Trains the tiny plugin with `options` into `dir`; returns its initial weight.
torch::Tensor ema_run(const std::vector<std::string>& options, const TempDir& dir) {
  Experiment exp = Experiment::build(tiny_config(ema_options(options)));
  const torch::Tensor w0 = exp.system->modules()[0].module->named_parameters()["weight"].detach().clone();
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  exp.use_images(data);
  Trainer(std::move(exp), dir.path().string()).fit();
  return w0;
}

// Each checkpoint's shadow is d * shadow + (1 - d) * weight with the decay
// d(step) of the update after that step's batch; and not the weight itself.
void expect_shadows(const TempDir& dir, torch::Tensor shadow, const std::function<double(int)>& d) {
  for (int step = 1; step <= 4; ++step) {
    const torch::Tensor w = gantry::test::state_dict_of(ckpt_of(dir, step)).at("model.weight").toTensor();
    shadow = d(step) * shadow + (1 - d(step)) * w;
    const torch::Tensor saved = trainer_state_of(ckpt_of(dir, step)).at("ema.model.weight").toTensor();
    // float32 lerp vs this float32 formula: a few ulps of values below 1.
    EXPECT_LT((saved - shadow).abs().max().item<double>(), 1e-6) << "step " << step;
    EXPECT_GT((saved - w).abs().max().item<double>(), 1e-4) << "the shadow is the weight itself at step " << step;
  }
}

}  // namespace

TEST(Ema, TheShadowFollowsItsFormulaResumesExactlyAndDrawsTheSamples) {
  // Tiny plugin, SGD at lr 1 (large moves), ema.decay 0.5 without the warm-up
  // (Ema.TheWarmUpFollowsTheWeightsFirst); a checkpoint after every batch.
  TempDir dir, resumed;
  const std::vector<std::string> o = {"system.lr=1.0", "ema.decay=0.5", "ema.warmup=false"};
  expect_shadows(dir, ema_run(o, dir), [](int) { return 0.5; });
  auto ckpt = ckpt_of;
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  // Resumed from step 2: the same shadow at step 4, bit for bit.
  std::vector<std::string> r = ema_options(o);
  r.push_back("trainer.resume=" + ckpt(dir, 2));
  Trainer(Experiment::build(tiny_config(r), data), resumed.path().string()).fit();
  EXPECT_TRUE(torch::equal(trainer_state_of(ckpt(resumed, 4)).at("ema.model.weight").toTensor(),
                           trainer_state_of(ckpt(dir, 4)).at("ema.model.weight").toTensor()));
  // gantry sample uses the EMA weights: its outputs are the EMA linear map of its inputs.
  const auto out = gantry::test::run_gantry("sample -c '" + ckpt(dir, 4) + "' -n 4 --tensors s.pt", dir.path());
  ASSERT_EQ(out.exit_code, 0) << out.err;
  EXPECT_NE(out.out.find("sampling with the EMA weights (ema.decay 0.5, 2 tensors)"), std::string::npos) << out.out;
  const auto bytes = gantry::test::read_text(dir.path() / "s.pt");
  const auto d = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  const auto ts = trainer_state_of(ckpt(dir, 4));
  const torch::Tensor want = torch::nn::functional::linear(
      d.at("input").toTensor(), ts.at("ema.model.weight").toTensor(), ts.at("ema.model.bias").toTensor());
  EXPECT_TRUE(torch::allclose(d.at("output").toTensor(), want, 1e-5, 1e-6));
}

// ema.warmup (the default): the decay after the step-t batch is
// min(decay, (1 + t) / (10 + t)), so the first shadows follow the weights
// (0.1, 0.18, 0.25, ... of the old shadow) instead of averaging the random
// initialisation for ~1/(1 - decay) steps; a resume continues it exactly.
TEST(Ema, TheWarmUpFollowsTheWeightsFirst) {
  TempDir dir, resumed;
  const std::vector<std::string> o = {"system.lr=1.0", "ema.decay=0.999"};
  const torch::Tensor w0 = ema_run(o, dir);
  expect_shadows(dir, w0, [](int step) { return std::min(0.999, step / (9.0 + step)); });  // t = step - 1
  auto ckpt = ckpt_of;
  static const ImageDataset data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  // Without the warm-up the step-1 shadow would be 0.999 w0 + 0.001 w1: it is 0.1 w0 + 0.9 w1.
  const torch::Tensor w1 = gantry::test::state_dict_of(ckpt(dir, 1)).at("model.weight").toTensor();
  const torch::Tensor s1 = trainer_state_of(ckpt(dir, 1)).at("ema.model.weight").toTensor();
  EXPECT_LT((s1 - (0.1 * w0 + 0.9 * w1)).abs().max().item<double>(), 1e-6);
  std::vector<std::string> r = ema_options(o);
  r.push_back("trainer.resume=" + ckpt(dir, 2));
  Trainer(Experiment::build(tiny_config(r), data), resumed.path().string()).fit();
  EXPECT_TRUE(torch::equal(trainer_state_of(ckpt(resumed, 4)).at("ema.model.weight").toTensor(),
                           trainer_state_of(ckpt(dir, 4)).at("ema.model.weight").toTensor()));
}

// ema.for_validation: validation with the EMA weights (its own val_loss), or
// with the trained ones (the default); each run says which weights what uses.
TEST(Ema, ValidationUsesTheEmaWeightsOnlyWhenAsked) {
  std::map<std::string, std::string> val_loss;
  for (const std::string mode : {"false", "true"}) {
    TempDir dir;
    const auto r = gantry::test::run_gantry(
        "train '" + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
            "' system.plugin=" + gantry::test::plugin_path("tiny") +
            " system.synthetic=true system.pixels=2 data.path=/nonexistent trainer.max_steps=-1 trainer.max_epochs=1 "
            "trainer.val_every_n_epochs=1 ema.decay=0.9 trainer.progress=none ema.for_validation=" +
            mode,
        dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find(mode == "true" ? "validation uses them too (ema.for_validation)"
                                        : "validation uses the trained weights"),
              std::string::npos)
        << r.out;
    const auto column = gantry::test::column_by_step(dir.path() / "runs/tiny/latest/metrics.csv", "val_loss");
    if (!column.empty()) val_loss[mode] = column.rbegin()->second;
    ASSERT_FALSE(val_loss[mode].empty()) << gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv");
  }
  EXPECT_NE(val_loss["false"], val_loss["true"]);
}

TEST(Ema, AModuleNameTheSystemLacksIsOneError) {
  EXPECT_NE(config_error({"ema.decay=0.9", "ema.modules=generator"})
                .find("ema.modules names 'generator', which modules() does not return (it returns: model)"),
            std::string::npos);
}
