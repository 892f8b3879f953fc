// A real run: 200 steps of the GAN on Fashion-MNIST. Losses are finite and
// move, the grids are written and not constant, and the samples' pixel
// distribution is closer to the data's at step 200 than at step 0.
#include <torch/torch.h>

#include <csignal>
#include <fstream>
#include <map>
#include <thread>
#include <sys/wait.h>

#include "gantry/errors.hpp"
#include "io/png.hpp"
#include "runtime/runtime.hpp"
#include "support.hpp"
#include "train/accelerator.hpp"
#include "train/callback.hpp"
#include "train/fit_stop.hpp"
#include "train/model.hpp"
#include "train/step_context.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;

namespace {

// 32-bin histogram of the pixels inside the 28x28 tiles of an 8x8 grid (padding excluded).
std::vector<double> tile_histogram(const Image8& grid) {
  std::vector<double> h(32, 0.0);
  double n = 0;
  for (int t = 0; t < 64; ++t) {
    const int y0 = 2 + (t / 8) * 30, x0 = 2 + (t % 8) * 30;
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x) {
        h[grid.pixels[(y0 + y) * grid.width + x0 + x] / 8] += 1;
        n += 1;
      }
  }
  for (auto& v : h) v /= n;
  return h;
}

double l1(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::abs(a[i] - b[i]);
  return d;
}

// metrics.csv's training rows as numbers (without the `kind` column, each
// checked to be `train`), and its header (with it).
std::vector<std::vector<double>> read_rows(const std::string& csv, std::vector<std::string>& header) {
  auto lines = gantry::test::lines_of(csv);
  std::vector<std::vector<double>> rows;
  std::stringstream hs(lines.at(0));
  std::string cell;
  while (std::getline(hs, cell, ',')) header.push_back(cell);
  const size_t kind = std::find(header.begin(), header.end(), "kind") - header.begin();
  EXPECT_EQ(kind, 3u) << lines[0];
  for (size_t i = 1; i < lines.size(); ++i) {
    std::stringstream ls(lines[i]);
    std::vector<double> row;
    for (size_t c = 0; std::getline(ls, cell, ','); ++c) {
      if (c == kind)
        EXPECT_EQ(cell, "train") << lines[i];
      else
        row.push_back(std::stod(cell));
    }
    rows.push_back(row);
  }
  return rows;
}

}  // namespace

TEST(Training, GanLearnsOnFashionMnistIn200Steps) {
  TempDir dir;
  const auto cfg = ExperimentConfig::load(
      gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
      {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=200", "trainer.log_every_n_steps=10",
       "trainer.image_every_n_steps=200", "trainer.progress=none", "checkpoint.every_n_steps=0"});
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  const FitResult r = Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
  EXPECT_EQ(r.state.global_step, 200);

  // Losses: finite, 20 rows, and they move.
  std::vector<std::string> header;
  const auto rows = read_rows(gantry::test::read_text(dir / "metrics.csv"), header);
  ASSERT_EQ(header, (std::vector<std::string>{"step", "epoch", "wall_time", "kind", "g_loss", "d_loss"}));
  ASSERT_EQ(rows.size(), 20u);
  EXPECT_EQ(rows.front()[0], 10);
  EXPECT_EQ(rows.back()[0], 200);
  double g_min = 1e9, g_max = -1e9;
  for (const auto& row : rows) {
    ASSERT_EQ(row.size(), 5u);
    EXPECT_TRUE(std::isfinite(row[3]) && std::isfinite(row[4]));
    g_min = std::min(g_min, row[3]);
    g_max = std::max(g_max, row[3]);
  }
  EXPECT_GT(g_max - g_min, 0.05) << "g_loss did not move";

  // Grids: written at steps 0 and 200, not constant.
  const Image8 at0 = decode_png(gantry::test::read_text(dir / "images/generated_0000000.png"));
  const Image8 at200 = decode_png(gantry::test::read_text(dir / "images/generated_0000200.png"));
  ASSERT_EQ(at200.width, 8 * 30 + 2);
  const auto [lo, hi] = std::minmax_element(at200.pixels.begin(), at200.pixels.end());
  EXPECT_GT(int(*hi) - int(*lo), 100) << "the grid at step 200 is (nearly) constant";

  // Samples: closer to the data's pixel distribution at 200 than at 0.
  const auto real = data.images.slice(0, 0, 64);
  Image8 real_grid;
  real_grid.width = at0.width;
  real_grid.height = at0.height;
  real_grid.channels = 1;
  real_grid.pixels.assign(size_t(at0.width) * at0.height, 0);
  for (int t = 0; t < 64; ++t)
    for (int y = 0; y < 28; ++y)
      for (int x = 0; x < 28; ++x)
        real_grid.pixels[(2 + (t / 8) * 30 + y) * real_grid.width + 2 + (t % 8) * 30 + x] =
            real[t][0][y][x].item<uint8_t>();
  const auto h_real = tile_histogram(real_grid);
  const double d0 = l1(tile_histogram(at0), h_real), d200 = l1(tile_histogram(at200), h_real);
  EXPECT_LT(d200, d0 * 0.8) << "histogram L1 to the data: step 0 " << d0 << ", step 200 " << d200;
  std::cout << "pixel-histogram L1 distance to the data: step 0 " << d0 << ", step 200 " << d200 << "; " << r.seconds
            << " s for 200 steps\n";
}

TEST(Training, NanLossStopsTheRunNamingStepAndMetric) {
  TempDir dir;
  const auto cfg =
      ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
                             {"system.plugin=" + gantry::test::gan_plugin_path(), "system.lr=1e30",
                              "trainer.max_steps=50", "trainer.progress=none", "trainer.image_every_n_steps=0"});
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  try {
    Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
    FAIL() << "expected a TrainingError";
  } catch (const TrainingError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step "), std::string::npos) << msg;
    EXPECT_TRUE(msg.find("_loss is NaN") != std::string::npos || msg.find("_loss is Inf") != std::string::npos) << msg;
  }
}

namespace {

// The GAN on Fashion-MNIST for `steps` steps with a metrics row every step.
std::vector<std::vector<double>> rows_of_run(const TempDir& dir, const std::string& precision, int steps) {
  const auto cfg = ExperimentConfig::load(
      gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
      {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=" + std::to_string(steps),
       "trainer.log_every_n_steps=1", "trainer.image_every_n_steps=0", "trainer.progress=none",
       "trainer.precision=" + precision});
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
  std::vector<std::string> header;
  return read_rows(gantry::test::read_text(dir / "metrics.csv"), header);
}

}  // namespace

// trainer.precision=bf16-mixed: the forwards run in bfloat16 (the first
// d_loss, computed before any update from the same weights, differs from
// float32's, by less than bf16's rounding can explain), training moves the
// losses, and the weights stay float32.
TEST(Training, Bf16MixedRunsTheForwardInBf16WithFloat32Weights) {
  TempDir fp32_dir, bf16_dir;
  const auto fp32 = rows_of_run(fp32_dir, "32", 30);
  const auto bf16 = rows_of_run(bf16_dir, "bf16-mixed", 30);
  ASSERT_EQ(fp32.size(), 30u);
  ASSERT_EQ(bf16.size(), 30u);
  // Step 1's d_loss (~0.71, the mean of two means of 64 BCE terms): bf16 keeps 8 significant
  // bits (relative rounding 2^-9 of each input and weight), so the logits move
  // by ~1e-3 and the loss by well under 0.05; float32 agrees with itself exactly.
  const double d = std::abs(bf16[0][4] - fp32[0][4]);
  EXPECT_GT(d, 1e-7) << "bf16-mixed gave float32's d_loss: autocast did nothing";
  EXPECT_LT(d, 0.05) << "bf16-mixed d_loss " << bf16[0][4] << " vs float32 " << fp32[0][4];
  double g_min = 1e9, g_max = -1e9;
  for (const auto& row : bf16) {
    ASSERT_TRUE(std::isfinite(row[3]) && std::isfinite(row[4]));
    g_min = std::min(g_min, row[3]);
    g_max = std::max(g_max, row[3]);
  }
  EXPECT_GT(g_max - g_min, 0.05) << "bf16-mixed g_loss did not move";
  const auto sd = gantry::test::state_dict_of(bf16_dir / "checkpoints/step_0000030.ckpt");
  for (const auto& e : sd) {
    if (e.value().toTensor().is_floating_point()) {
      EXPECT_EQ(e.value().toTensor().scalar_type(), torch::kFloat) << e.key().toStringRef() << " is not float32";
    }
  }
  std::cout << "step 1 d_loss: float32 " << fp32[0][4] << ", bf16-mixed " << bf16[0][4] << "; step 30 g_loss "
            << fp32[29][3] << " vs " << bf16[29][3] << "\n";
}

namespace {

std::string nan_message(const std::string& read_metrics) {
  TempDir dir;
  const auto cfg =
      ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
                             {"system.plugin=" + gantry::test::gan_plugin_path(), "system.lr=1e30",
                              "trainer.max_steps=50", "trainer.log_every_n_steps=20", "trainer.progress=none",
                              "trainer.image_every_n_steps=0", "trainer.read_metrics=" + read_metrics});
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  try {
    Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
  } catch (const TrainingError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// trainer.read_metrics=on_log (the GPU default: no host-device sync between
// log steps) reads the same values as every_step, later: the rows are the
// same, bit for bit, and a NaN names the same step and metric.
TEST(Training, ReadingMetricsOnlyOnLogStepsGivesTheSameRowsAndTheSameNanStep) {
  std::map<std::string, std::string> rows;
  for (std::string mode : {"every_step", "on_log"}) {
    TempDir dir;
    const auto cfg =
        ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
                               {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=45",
                                "trainer.log_every_n_steps=10", "trainer.image_every_n_steps=0",
                                "trainer.progress=none", "trainer.threads=1", "trainer.read_metrics=" + mode});
    const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
    Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
    rows[mode] = gantry::test::rows_without_wall_time(gantry::test::read_text(dir / "metrics.csv"));
  }
  EXPECT_EQ(gantry::test::lines_of(rows["on_log"]).size(), 6u) << rows["on_log"];  // header, 10..40, 45
  EXPECT_EQ(rows["on_log"], rows["every_step"]);
  const std::string each = nan_message("every_step"), deferred = nan_message("on_log");
  ASSERT_NE(each.find(" is NaN"), std::string::npos) << each;
  EXPECT_EQ(deferred, each);
}

// trainer.cuda_graphs on the CPU: one line saying why not, then the same
// run as without the key, bit for bit (the graph itself: Cuda.*_CUDA).
TEST(Training, CudaGraphsOnTheCpuSayWhyAndRunEagerly) {
  std::map<std::string, std::string> rows;
  for (std::string graphs : {"false", "true"}) {
    TempDir dir;
    const auto cfg = ExperimentConfig::load(
        gantry::test::kDemo, {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=30",
                              "trainer.log_every_n_steps=10", "trainer.image_every_n_steps=0", "trainer.progress=none",
                              "trainer.threads=1", "trainer.cuda_graphs=" + graphs});
    const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
    testing::internal::CaptureStdout();
    Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
    const std::string out = testing::internal::GetCapturedStdout();
    const bool said = out.find(
                          "cuda graphs: off (trainer.cuda_graphs is for trainer.accelerator=cuda; this run is "
                          "on the CPU); the step runs eagerly") != std::string::npos;
    EXPECT_EQ(said, graphs == "true") << out;
    rows[graphs] = gantry::test::rows_without_wall_time(gantry::test::read_text(dir / "metrics.csv"));
  }
  EXPECT_EQ(gantry::test::lines_of(rows["true"]).size(), 4u) << rows["true"];
  EXPECT_EQ(rows["true"], rows["false"]);
}

// What trainer.cuda_graphs' warm-up asks the step context: the host values a
// plugin's step read (a graph would freeze them), each read once, then reset.
TEST(Training, TheStepContextReportsWhatAStepReadFromTheHost) {
  std::vector<OptimizerSlot> slots;
  StepContextImpl ctx(slots, torch::kCPU, 0, 1, [](const std::string&, const torch::Tensor&, double, double) {});
  ctx.begin(7, 0);
  EXPECT_EQ(ctx.take_host_reads(), "");
  ctx.log("loss", torch::ones({}), false);  // device values and the rank are not host reads
  EXPECT_EQ(ctx.rank(), 0);
  EXPECT_EQ(ctx.take_host_reads(), "");
  EXPECT_TRUE(ctx.every_n_steps(4));  // (7 + 1) % 4 == 0: reads global_step()
  ctx.set_batch_source([] { return std::optional<Batch>(); });
  EXPECT_FALSE(ctx.next_batch().has_value());
  EXPECT_EQ(ctx.global_step(), 7);
  EXPECT_EQ(ctx.take_host_reads(), "ctx.global_step(), ctx.next_batch()");
  EXPECT_EQ(ctx.epoch(), 0);
  EXPECT_EQ(ctx.take_host_reads(), "ctx.epoch()");
  EXPECT_EQ(ctx.take_host_reads(), "");
}

TEST(Config, SixteenMixedIsRefusedNamingTheKey) {
  const std::string msg =
      gantry::test::config_error([] { ExperimentConfig::load(gantry::test::kDemo, {"trainer.precision=16-mixed"}); });
  EXPECT_NE(msg.find("trainer.precision"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bf16-mixed"), std::string::npos) << msg;
}

namespace {

// AnonHugePages of process `pid`, in KiB (-1 when it is gone).
long anon_huge_kib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/smaps_rollup");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  return -1;
}

}  // namespace

TEST(Runtime, TheHeapGetsHugePages) {
  std::ifstream modes_file("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(modes_file, modes);
  if (modes.find("[never]") != std::string::npos) GTEST_SKIP() << "transparent huge pages are off here: " << modes;
  ASSERT_EQ(std::getenv("GLIBC_TUNABLES"), nullptr) << "the test needs glibc's defaults";
  // The calls, in this process: nothing untuned (glibc would trim the grown
  // top at once), then the top advised, once.
  EXPECT_EQ(advise_huge_heap(), 0u);
  ASSERT_TRUE(configure_allocator());
  EXPECT_GT(advise_huge_heap(), size_t(256) << 20);
  EXPECT_EQ(advise_huge_heap(), 0u);
  // A real run with trainer.huge_pages on and off: the most AnonHugePages
  // seen while it trains (its parameters, Adam state and step buffers).
  std::map<std::string, long> most;
  for (std::string on : {"true", "false"}) {
    TempDir dir;
    const pid_t pid = gantry::test::spawn_gantry("train '" + gantry::test::kDemo +
                                                     "' trainer.max_steps=150 trainer.threads=1 trainer.progress=none "
                                                     "trainer.huge_pages=" +
                                                     on,
                                                 dir.path().string(), dir / "log.txt");
    int status = 0;
    bool exited = false;
    for (int i = 0; i < 1200 && !exited; ++i) {  // at most a minute
      most[on] = std::max(most[on], anon_huge_kib(pid));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      exited = ::waitpid(pid, &status, WNOHANG) == pid;
    }
    if (!exited) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    ASSERT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0) << gantry::test::read_text(dir / "log.txt");
  }
  EXPECT_GE(most["true"], 32 * 1024) << "KiB of AnonHugePages";
  EXPECT_LT(most["false"], 8 * 1024) << "KiB of AnonHugePages";
}

// ---- the loop's order: its points, the callbacks' slots, why it stops --------

namespace {

// Writes "point@step" for every loop point it is called at.
class Recorder final : public Callback {
 public:
  explicit Recorder(std::vector<std::string>& log) : log_(log) {}
  void on_fit_start(FitState& f) override { add("fit_start", f); }
  void on_batch_start(FitState& f) override { add("batch_start", f); }
  void on_batch_end(FitState& f) override { add("batch_end", f); }
  void on_image_step(FitState& f) override { add("image", f); }
  void on_log_step(FitState& f) override { add("log", f); }
  void on_checkpoint_step(FitState& f) override { add("checkpoint", f); }
  void on_epoch_end(FitState& f) override { add("epoch_end", f); }
  void on_train_end(FitState& f) override { add("train_end", f); }
  void on_fit_end(FitState& f) override { add("fit_end", f); }

 private:
  void add(const char* point, const FitState& f) {
    log_.push_back(std::string(point) + "@" + std::to_string(f.state.global_step));
  }
  std::vector<std::string>& log_;
};

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : " ") + x;
  return s;
}

}  // namespace

// The fit loop's points in order, for 6 batches of epochs of 4 (tiny's own
// ring of 4096 points in batches of 1024), rows every 2, grids every 3,
// checkpoints every 4: within a batch, batch_end, then image, log and
// checkpoint; an epoch's end after its last batch's points; max_steps ends
// the run mid-epoch (no epoch_end for the partial one).
TEST(Training, TheLoopCallsItsPointsInOrder) {
  TempDir dir;
  const auto cfg = ExperimentConfig::load(
      gantry::test::source_path("tests/sdk_plugin/tiny.yaml"),
      {"system.plugin=" + gantry::test::plugin_path("tiny"), "system.synthetic=true", "system.pixels=2",
       "data.batch_size=1024", "trainer.max_steps=6", "trainer.log_every_n_steps=2", "trainer.image_every_n_steps=3",
       "checkpoint.every_n_steps=4", "trainer.threads=1"});
  std::vector<std::string> log;
  Trainer trainer(Experiment::build(cfg), dir.path().string());
  trainer.add_callback(std::make_unique<Recorder>(log));
  const FitResult r = trainer.fit();
  EXPECT_EQ(joined(log),
            "fit_start@0 "
            "batch_start@0 batch_end@1 "
            "batch_start@1 batch_end@2 log@2 "
            "batch_start@2 batch_end@3 image@3 "
            "batch_start@3 batch_end@4 log@4 checkpoint@4 epoch_end@4 "
            "batch_start@4 batch_end@5 "
            "batch_start@5 batch_end@6 image@6 log@6 "
            "train_end@6 fit_end@6");
  EXPECT_EQ(r.stop_reason, "trainer.max_steps=6 reached");
}

// Callbacks run in the order of their slots, whatever order they were added
// in (those of one slot in the order added): what each sees (the EMA before
// the samples, the lrs and samples before the row, everything before the
// checkpoint) is stated by CallbackSlot, not by the trainer's lines.
TEST(Training, CallbacksRunInTheOrderOfTheirSlots) {
  std::vector<std::string> log;
  class Named final : public Callback {
   public:
    Named(std::vector<std::string>& log, std::string name) : log_(log), name_(std::move(name)) {}
    void on_batch_end(FitState&) override { log_.push_back(name_); }

   private:
    std::vector<std::string>& log_;
    std::string name_;
  };
  Callbacks callbacks;
  using Slot = CallbackSlot;
  callbacks.add(Slot::kCheckpoint, std::make_unique<Named>(log, "checkpoint"));
  callbacks.add(Slot::kMetrics, std::make_unique<Named>(log, "metrics"));
  callbacks.add(Slot::kUser, std::make_unique<Named>(log, "user1"));
  callbacks.add(Slot::kSamples, std::make_unique<Named>(log, "samples"));
  callbacks.add(Slot::kEma, std::make_unique<Named>(log, "ema"));
  callbacks.add(Slot::kUser, std::make_unique<Named>(log, "user2"));
  callbacks.add(Slot::kLrSchedulers, std::make_unique<Named>(log, "lr"));
  TempDir dir;
  const auto cfg = ExperimentConfig::load(gantry::test::source_path("tests/sdk_plugin/tiny.yaml"),
                                          {"system.plugin=" + gantry::test::plugin_path("tiny")});
  auto accel = make_accelerator(cfg, {});
  Model model(Experiment::build(cfg), *accel);
  const std::string no_dir;
  FitState fit(model, *accel, no_dir, {});
  callbacks.call(&Callback::on_batch_end, fit);
  EXPECT_EQ(joined(log), "ema samples lr metrics user1 user2 checkpoint");
}

namespace {

// Counts the batches it saw, across resumes: its count is its state.
class Counter final : public Callback {
 public:
  explicit Counter(std::vector<int64_t>& loaded) : loaded_(loaded) {}
  void on_batch_end(FitState&) override { ++batches_; }
  std::vector<std::string> state_keys() const override { return {"counter."}; }
  TensorMap state(FitState&) override { return {{"counter.batches", torch::tensor(batches_, torch::kInt64)}}; }
  void load(FitState&, const TensorMap& saved) override {
    const auto it = saved.find("counter.batches");
    batches_ = it == saved.end() ? 0 : it->second.item<int64_t>();
    loaded_.push_back(batches_);
  }
  void on_fit_end(FitState&) override { loaded_.push_back(batches_); }

 private:
  std::vector<int64_t>& loaded_;
  int64_t batches_ = 0;
};

}  // namespace

// A callback's state() goes into every checkpoint and comes back through
// load() at a resume (an empty map on a fresh run): a counter trained 4 of
// 6 steps, resumed from step 4 to step 8, has counted 8.
TEST(Training, ACallbackKeepsItsStateAcrossAResume) {
  TempDir dir;
  const std::vector<std::string> base = {"system.plugin=" + gantry::test::plugin_path("tiny"),
                                         "system.synthetic=true",
                                         "system.pixels=2",
                                         "data.batch_size=1024",
                                         "checkpoint.every_n_steps=4",
                                         "trainer.threads=1",
                                         "trainer.progress=none"};
  auto with = [&](std::vector<std::string> more) {
    more.insert(more.begin(), base.begin(), base.end());
    return ExperimentConfig::load(gantry::test::source_path("tests/sdk_plugin/tiny.yaml"), more);
  };
  std::vector<int64_t> first, resumed;
  {
    Trainer trainer(Experiment::build(with({"trainer.max_steps=6"})), dir / "a");
    trainer.add_callback(std::make_unique<Counter>(first));
    trainer.fit();
  }
  EXPECT_EQ(first, (std::vector<int64_t>{0, 6}));  // loaded nothing, counted 6
  const std::string step4 = dir / "a/checkpoints/step_0000004.ckpt";
  ASSERT_TRUE(std::filesystem::exists(step4));
  Trainer trainer(Experiment::build(with({"trainer.max_steps=8", "trainer.resume=" + step4})), dir / "b");
  trainer.add_callback(std::make_unique<Counter>(resumed));
  trainer.fit();
  EXPECT_EQ(resumed, (std::vector<int64_t>{4, 8}));  // step 4's count, then 4 more batches
}

// A callback's keys are its own: two whose prefixes overlap are refused when
// added, and a key outside its prefixes fails the checkpoint that asks for it.
TEST(Training, CallbackStateKeysAreOwnedByOne) {
  class Keeps final : public Callback {
   public:
    Keeps(std::string prefix, std::string key) : prefix_(std::move(prefix)), key_(std::move(key)) {}
    std::vector<std::string> state_keys() const override { return {prefix_}; }
    TensorMap state(FitState&) override { return {{key_, torch::zeros({1})}}; }

   private:
    std::string prefix_, key_;
  };
  Callbacks callbacks;
  callbacks.add(CallbackSlot::kUser, std::make_unique<Keeps>("mine.", "mine.x"));
  try {
    callbacks.add(CallbackSlot::kUser, std::make_unique<Keeps>("mine.sub.", "mine.sub.x"));
    ADD_FAILURE() << "an overlapping prefix was taken";
  } catch (const std::logic_error& e) {
    EXPECT_EQ(std::string(e.what()),
              "callback: user keeps its state under 'mine.sub.', which callback: user's 'mine.' overlaps");
  }
  callbacks.add(CallbackSlot::kUser, std::make_unique<Keeps>("other.", "stray.x"));
  TempDir dir;
  const auto cfg = ExperimentConfig::load(gantry::test::source_path("tests/sdk_plugin/tiny.yaml"),
                                          {"system.plugin=" + gantry::test::plugin_path("tiny")});
  auto accel = make_accelerator(cfg, {});
  Model model(Experiment::build(cfg), *accel);
  const std::string no_dir;
  FitState fit(model, *accel, no_dir, {});
  TensorMap trainer_state{{"mine.old", torch::ones({1})}, {"unowned", torch::ones({1})}};
  EXPECT_THROW(callbacks.save_state(fit, trainer_state), std::logic_error);
  Callbacks good;
  good.add(CallbackSlot::kUser, std::make_unique<Keeps>("mine.", "mine.x"));
  good.save_state(fit, trainer_state);
  // Its old key replaced by what it returns now; another's kept.
  EXPECT_EQ(trainer_state.count("mine.old"), 0u);
  EXPECT_EQ(trainer_state.count("mine.x"), 1u);
  EXPECT_EQ(trainer_state.count("unowned"), 1u);
}

// Every reason to stop, through the one FitStop: the first reason stays,
// except that reaching max_epochs names itself over a wish not yet agreed.
TEST(Training, FitStopKeepsTheFirstReason) {
  TrainerOptions t;
  t.max_steps = 10;
  t.max_epochs = 2;
  {
    FitStop stop(t, 10);
    TrainState s;
    s.global_step = 10;
    stop.at_start(s);
    EXPECT_TRUE(stop.done());
    EXPECT_EQ(stop.reason(), "already at step 10 of 10");
  }
  {
    FitStop stop(t, 10);
    TrainState s;
    s.global_step = 3;
    EXPECT_EQ(stop.wish(s, 0.0), "");
    stop.after_batch(false);
    EXPECT_FALSE(stop.done());
    stop.after_batch(true);  // another rank's wish, agreed
    EXPECT_TRUE(stop.done());
    EXPECT_EQ(stop.reason(), "another rank asked to stop (its output says why)");
    s.global_step = 10;
    EXPECT_EQ(stop.wish(s, 0.0), "trainer.max_steps=10 reached");
    EXPECT_EQ(stop.reason(), "another rank asked to stop (its output says why)");  // the first stays
  }
  {
    FitStop stop(t, 10);
    TrainState s;
    s.global_step = 10;
    EXPECT_EQ(stop.wish(s, 0.0), "trainer.max_steps=10 reached");
    stop.after_batch(false, true);
    EXPECT_TRUE(stop.done());
    EXPECT_EQ(stop.reason(), "trainer.max_steps=10 reached");
  }
  {
    FitStop stop(t, 10);
    TrainState s;
    s.epoch = 1;
    stop.after_epoch(s);
    EXPECT_FALSE(stop.done());
    s.epoch = 2;
    stop.after_epoch(s);
    EXPECT_TRUE(stop.done());
    EXPECT_EQ(stop.reason(), "trainer.max_epochs=2 reached");
  }
  {
    TrainerOptions timed = t;
    timed.max_steps = -1;
    timed.max_time = "00:00:00:01";
    FitStop stop(timed, -1);
    TrainState s;
    EXPECT_EQ(stop.wish(s, 0.5), "");
    EXPECT_EQ(stop.wish(s, 1.5), "trainer.max_time=00:00:00:01 reached");
  }
  {
    // Another rank's wish names the rank and why (its output may say nothing:
    // only rank 0 prints the run's end), and the largest code wins the all-reduce.
    FitStop stop(t, 10);
    TrainState s;
    s.global_step = 3;
    EXPECT_EQ(stop.wish(s, 0.0), "");
    EXPECT_EQ(stop.wish_code(0), 0);
    install_stop_signals();
    ::raise(SIGTERM);  // caught: the stop flag
    EXPECT_EQ(stop.wish(s, 0.0), "stopped by signal 15 (SIGTERM)");
    const int32_t signal_of_2 = stop.wish_code(2);
    clear_stop_request();
    for (int sig : {SIGINT, SIGTERM, SIGUSR1, SIGUSR2, SIGHUP}) std::signal(sig, SIG_DFL);
    TrainerOptions timed = t;
    timed.max_time = "5";
    FitStop other(timed, 10);
    EXPECT_EQ(other.wish(s, 6.0), "trainer.max_time=5 reached");
    EXPECT_GT(signal_of_2, other.wish_code(7));
    FitStop zero(t, 10);
    zero.after_batch(true, false, std::max(signal_of_2, other.wish_code(7)));
    EXPECT_EQ(zero.reason(), "rank 2 was stopped by signal 15 (SIGTERM)");
    EXPECT_EQ(FitStop::describe_wish(other.wish_code(7), "5"), "rank 7 reached trainer.max_time=5");
  }
  EXPECT_EQ(bad_metric_error("", 41), "step 41: another rank logged a NaN/Inf metric; stopping");
  EXPECT_EQ(bad_metric_error("step 41: g_loss is nan", 41), "step 41: g_loss is nan");
}
