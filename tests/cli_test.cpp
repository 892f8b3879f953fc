// The gantry CLI as a user meets it: bad input is one line on stderr naming
// the culprit and a non-zero exit; a short run writes the run directory.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>
#include <thread>

#include <ATen/Version.h>

#include "io/png.hpp"
#include "files/files.hpp"
#include "runtime/runtime.hpp"
#include "support.hpp"
#include "wire/message.hpp"
#include "wire/record_log.hpp"

using gantry::test::CommandResult;
using gantry::test::kDemo;
using gantry::test::lines_of;
using gantry::test::run_gantry;
using gantry::test::TempDir;
using gantry::test::write_text;

namespace {

// Exactly one non-empty line on stderr, starting "gantry: error:" and containing `what`.
void expect_one_error_line(const CommandResult& r, const std::string& what) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const auto lines = lines_of(r.err);
  ASSERT_EQ(lines.size(), 1u) << r.err;
  EXPECT_EQ(lines[0].rfind("gantry: error: ", 0), 0u) << lines[0];
  EXPECT_NE(lines[0].find(what), std::string::npos) << lines[0];
}

}  // namespace

TEST(Cli, UnknownOverrideKey) {
  TempDir dir;
  expect_one_error_line(run_gantry("train '" + kDemo + "' trainer.max_stepz=3", dir.path()),
                        "did you mean 'trainer.max_steps'");
}

TEST(Cli, PluginThatIsNotALibrary) {
  TempDir dir;
  expect_one_error_line(
      run_gantry("train '" + kDemo + "' system.plugin=" + gantry::test::plugin_path("notalib"), dir.path()),
      "is not a loadable shared library");
}

TEST(Cli, PluginOfAnotherLibTorch) {
  TempDir dir;
  expect_one_error_line(
      run_gantry("validate '" + kDemo + "' system.plugin=" + gantry::test::plugin_path("other_torch"), dir.path()),
      "was built against LibTorch 2.11");
}

TEST(Cli, MissingData) {
  TempDir dir;
  expect_one_error_line(run_gantry("train '" + kDemo + "' data.path=/nonexistent", dir.path()),
                        "/nonexistent: data.path is not a directory");
}

TEST(Cli, WrongShapeData) {
  TempDir dir;
  // 4 images of 1x8x8: the GAN expects 1x28x28.
  write_text(dir / "train-images-idx3-ubyte", gantry::test::idx_bytes({4, 8, 8}, std::string(4 * 64, '\x10')));
  expect_one_error_line(run_gantry("train '" + kDemo + "' data.path=" + dir.path().string(), dir.path()),
                        "plugin gan expects [1, 28, 28]");
}

TEST(Cli, ValidateAcceptsTheDemo) {
  TempDir dir;
  const auto r = run_gantry("validate '" + kDemo + "'", dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(": OK (plugin gan 0.1.0"), std::string::npos) << r.out;
}

TEST(Cli, PluginsListsTheGan) {
  const auto r = run_gantry("plugins");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("gan 0.1.0 (ABI 1.3"), std::string::npos) << r.out;  // built with this SDK
}

TEST(Cli, TrainWritesRunDirectoryThenSampleReadsTheCheckpoint) {
  TempDir dir;
  const auto r = run_gantry("train '" + kDemo +
                                "' trainer.max_steps=30 trainer.log_every_n_steps=10 "
                                "trainer.image_every_n_steps=20 checkpoint.every_n_steps=20",
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 30"), std::string::npos) << r.out;
  // The GAN's two optimizers: Lightning's max_steps would count 60 (issue 47.4).
  EXPECT_NE(r.out.find("trainer.max_steps=30 counts batches: 60 optimizer steps with this plugin's 2 optimizers"),
            std::string::npos)
      << r.out;
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  ASSERT_TRUE(std::filesystem::is_symlink(run));
  for (const char* f :
       {"config.yaml", "metrics.csv", "images/generated_0000000.png", "images/generated_0000020.png",
        "images/generated_0000030.png", "checkpoints/step_0000020.ckpt", "checkpoints/step_0000030.ckpt"})
    EXPECT_TRUE(std::filesystem::exists(run / f)) << f;
  // The resolved config records the overrides, and is itself a valid config.
  const auto resolved = gantry::test::read_text(run / "config.yaml");
  EXPECT_NE(resolved.find("max_steps: 30"), std::string::npos) << resolved;
  const auto v = run_gantry("validate '" + (run / "config.yaml").string() + "'", dir.path());
  EXPECT_EQ(v.exit_code, 0) << v.err;
  // No partial files left behind by the atomic writes.
  for (const auto& e : std::filesystem::recursive_directory_iterator(run))
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();

  const auto s = run_gantry(
      "sample --checkpoint '" + (run / "checkpoints/step_0000030.ckpt").string() + "' -n 16 -o grid.png", dir.path());
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const auto grid = gantry::decode_png(gantry::test::read_text(dir / "grid.png"));
  EXPECT_EQ(grid.width, 8 * 30 + 2);
  EXPECT_EQ(grid.height, 2 * 30 + 2);
}

TEST(Cli, SampleFromCorruptCheckpoint) {
  TempDir dir;
  write_text(dir / "bad.ckpt", "garbage");
  expect_one_error_line(run_gantry("sample --checkpoint bad.ckpt", dir.path()), "bad.ckpt");
}

TEST(Cli, WarnsInOneLineWhenTheReferenceBlasIsInUse) {
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  ASSERT_TRUE(std::filesystem::exists(reference)) << "libblas3 (a dependency of libtorch) is missing";
  TempDir dir;
  // The torch wheel's LibTorch (2.x) has MKL built in: no libblas.so.3 is ever called, nothing to warn about.
  if (at::show_config().find("BLAS_INFO=mkl") != std::string::npos) {
    const auto r = run_gantry("validate '" + kDemo + "'", dir.path(), "LD_PRELOAD=" + reference);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.err.find("reference BLAS"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("| MKL (built into LibTorch), "), std::string::npos) << r.out;
    return;
  }
  const auto slow = run_gantry("validate '" + kDemo + "'", dir.path(), "LD_PRELOAD=" + reference);
  EXPECT_EQ(slow.exit_code, 0) << slow.err;
  const auto lines = lines_of(slow.err);
  ASSERT_EQ(lines.size(), 1u) << slow.err;
  EXPECT_NE(lines[0].find("warning: LibTorch is using the reference BLAS"), std::string::npos);
  EXPECT_NE(lines[0].find("apt-get install libopenblas0-openmp"), std::string::npos);
  const auto fast = run_gantry("validate '" + kDemo + "'", dir.path());
  EXPECT_EQ(fast.err.find("reference BLAS"), std::string::npos) << fast.err;
  EXPECT_NE(fast.out.find("OpenBLAS"), std::string::npos) << fast.out;
}

TEST(Cli, ValidateChecksWhatTrainWillNeed) {
  // Each of these passed validate and then failed (or hung) in train.
  TempDir dir;
  auto validate = [&](const std::string& args, const std::string& env = "") {
    return run_gantry("validate '" + kDemo + "' " + args, dir.path(), env);
  };
  // A FIFO as the plugin: dlopen would block forever.
  ASSERT_EQ(::mkfifo((dir / "fifo.so").c_str(), 0644), 0);
  expect_one_error_line(validate("system.plugin=" + (dir / "fifo.so")), "fifo.so is not a regular file");
  // An out_dir below a file, and one on a read-only mount (root can write any
  // directory, so a read-only bind mount in a private mount namespace).
  write_text(dir / "file", "x");
  expect_one_error_line(validate("trainer.out_dir=" + (dir / "file/runs")), "is not a directory");
  expect_one_error_line(validate("trainer.out_dir=/proc/gantry/runs"),
                        "/proc is not writable");  // root passes access()
  std::filesystem::create_directories(dir / "ro");
  const std::string ro = dir / "ro";
  const auto r =
      validate("trainer.out_dir=" + ro + "/runs", "unshare -m --propagation private sh -c 'mount --bind -o ro " + ro +
                                                      " " + ro + " && exec \"$0\" \"$@\"'");
  expect_one_error_line(r, "trainer.out_dir '" + ro + "/runs': " + ro + " is not writable (Read-only file system)");
  // A truncated validation split, read only when validation is on.
  std::filesystem::create_directories(dir / "data");
  for (const char* f : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    std::filesystem::copy(gantry::test::fashion_mnist_dir() + "/" + f, dir.path() / "data" / f);
  write_text(dir / "data/t10k-images-idx3-ubyte", gantry::test::idx_bytes({100, 28, 28}, std::string(50 * 784, '\1')));
  const std::string data = " data.path=" + (dir / "data");
  EXPECT_EQ(validate(data).exit_code, 0) << validate(data).err;
  expect_one_error_line(validate(data + " trainer.val_every_n_epochs=1"), "t10k-images-idx3-ubyte");
}

TEST(Cli, TwoRunsOfOneExperimentNeverShareARunDirectory) {
  // Two `trainer.resume=auto` at once would both continue the newest run
  // directory: the second gets one line naming the first's pid.
  TempDir dir;
  const auto first = run_gantry("train '" + kDemo + "' trainer.max_steps=20", dir.path());
  ASSERT_EQ(first.exit_code, 0) << first.err;
  const std::string args = "train '" + kDemo + "' trainer.resume=auto trainer.max_steps=100000";
  const pid_t running = gantry::test::spawn_gantry(args, dir.path(), dir / "first.log");
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  for (int i = 0; i < 300 && gantry::test::read_text(dir / "first.log").find("run directory:") == std::string::npos;
       ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto second = run_gantry("train '" + kDemo + "' trainer.resume=auto trainer.max_steps=60", dir.path());
  ::kill(running, SIGTERM);
  int status = 0;
  ::waitpid(running, &status, 0);
  expect_one_error_line(second, "is in use by gantry pid " + std::to_string(running));
  EXPECT_NE(second.err.find(std::filesystem::canonical(run).filename().string()), std::string::npos) << second.err;
  // One writer: the run log's seqs are 1, 2, 3, ... with no duplicate.
  const auto frames = gantry::wire::replay((run / "stream.gantrylog").string()).frames;
  ASSERT_GT(frames.size(), 5u);
  for (size_t i = 0; i < frames.size(); ++i) EXPECT_EQ(gantry::wire::decode(frames[i]).seq, i + 1);
}

using gantry::test::kTiny;  // the SDK test plugin's config, with the plugin built by this tree

TEST(Cli, TheStopLineNamesTheLimitThatEndedTheRun) {
  TempDir dir;
  // Only max_steps given: the default epoch count does not cut it (Lightning's
  // rule; it once stopped at 1875, the end of epoch 0, without a word).
  auto r = run_gantry("train '" + kTiny + "' trainer.max_steps=1900", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 1900 (epoch 1): trainer.max_steps=1900 reached, after"), std::string::npos)
      << r.out;
  r = run_gantry("train '" + kTiny + "' trainer.max_steps=-1 trainer.max_epochs=1", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 1875 (epoch 1): trainer.max_epochs=1 reached, after"), std::string::npos) << r.out;
}

TEST(Cli, ARefusedRunLeavesNoRunDirectoryBehind) {
  TempDir dir;
  const auto experiment = dir.path() / "runs/tiny";
  auto r = run_gantry("train '" + kTiny + "' trainer.max_steps=2", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto good = std::filesystem::read_symlink(experiment / "latest");
  // A plugin asking for data this runner cannot give: validate and train refuse it.
  r = run_gantry("validate '" + kTiny + "' system.kind=text", dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("plugin tiny wants data of kind 'text'; this runner provides: images"), std::string::npos)
      << r.err;
  r = run_gantry("train '" + kTiny + "' system.kind=text", dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("wants data of kind 'text'"), std::string::npos) << r.err;
  // A key checked only once the system is built (ema.modules) refuses before anything is written, too.
  r = run_gantry("train '" + kTiny + "' ema.decay=0.9 ema.modules=generator", dir.path());
  EXPECT_NE(r.exit_code, 0) << r.out;
  EXPECT_NE(r.err.find("ema.modules names 'generator'"), std::string::npos) << r.err;
  EXPECT_EQ(gantry::test::run_dirs_in(experiment), 1) << "the refused run left its directory";
  EXPECT_EQ(std::filesystem::read_symlink(experiment / "latest"), good);
}

TEST(Cli, AMetricsRowHoldsTheMeanOfEverythingLoggedSinceThePreviousRow) {
  // Rows every 10 batches. ctx.global_step() is 0 during the first batch, so
  // the row labelled 10 holds batches 0..9: batch_index's mean is 4.5.
  // every_50 (logged when global_step % 50 == 0) lands in the rows 10 and 60;
  // once it was lost (a row held only its own batch's values). What
  // log_samples logs (before the first batch, after the last) is kept too.
  TempDir dir;
  const auto r = run_gantry("train '" + kTiny + "' system.log_steps=true trainer.max_steps=60", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto rows = gantry::test::lines_of(gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv"));
  ASSERT_EQ(rows.size(), 7u) << gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv");
  const auto header = gantry::test::split(rows[0], ',');
  auto cell = [&](size_t row, const std::string& column) {
    const auto cells = gantry::test::split(rows[row], ',');
    for (size_t i = 0; i < header.size(); ++i)
      if (header[i] == column) return i < cells.size() ? cells[i] : std::string();
    ADD_FAILURE() << "no column " << column << " in " << rows[0];
    return std::string();
  };
  for (int k = 1; k <= 6; ++k) {
    EXPECT_EQ(cell(k, "step"), std::to_string(10 * k));
    EXPECT_DOUBLE_EQ(std::stod(cell(k, "batch_index")), 10.0 * k - 5.5) << rows[k];
  }
  EXPECT_EQ(cell(1, "every_50"), "0");
  EXPECT_EQ(cell(6, "every_50"), "50");
  for (int k = 2; k <= 5; ++k) EXPECT_EQ(cell(k, "every_50"), "") << rows[k];
  EXPECT_EQ(cell(1, "sampled_at"), "0");
  // The final grid's value joins the step's training row: one row per step and kind.
  EXPECT_EQ(cell(6, "sampled_at"), "60");
  for (int k = 1; k <= 6; ++k) EXPECT_EQ(cell(k, "kind"), "train") << rows[k];
}

TEST(Cli, MetricsCsvKeepsItsColumnOrderOnResumeAndTheFiniteRowsBeforeANan) {
  // every_50 first appears in the row at 10; a run resumed from step 20 into
  // a new run directory sees it first at 60: its columns were another order.
  TempDir dir, again;
  const std::string args = "train '" + kTiny + "' system.log_steps=true checkpoint.every_n_steps=20 ";
  auto r = run_gantry(args + "trainer.max_steps=60", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto straight = gantry::test::lines_of(gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv"));
  r = run_gantry(args + "trainer.max_steps=60 trainer.resume=" +
                     (dir.path() / "runs/tiny/latest/checkpoints/step_0000020.ckpt").string(),
                 again.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto resumed = gantry::test::lines_of(gantry::test::read_text(again.path() / "runs/tiny/latest/metrics.csv"));
  ASSERT_FALSE(straight.empty());
  ASSERT_FALSE(resumed.empty());
  EXPECT_EQ(resumed[0], straight[0]);
  EXPECT_EQ(resumed.size(), 1u + 4u) << "rows 30, 40, 50, 60";
  // A NaN logged during the batch of global_step 25 stops the run; the
  // finite values of the batches before it (20..24) are a row at 25.
  TempDir nan;
  r = run_gantry(args + "trainer.max_steps=60 system.nan_at=25", nan.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("loss is NaN"), std::string::npos) << r.err;
  const auto rows = gantry::test::lines_of(gantry::test::read_text(nan.path() / "runs/tiny/latest/metrics.csv"));
  ASSERT_EQ(rows.size(), 4u) << "header, 10, 20, 25";
  const auto header = gantry::test::split(rows[0], ',');
  auto cell = [&](size_t row, const std::string& column) {
    const auto cells = gantry::test::split(rows[row], ',');
    const size_t i = std::find(header.begin(), header.end(), column) - header.begin();
    return i < cells.size() ? cells[i] : std::string("(none)");
  };
  EXPECT_EQ(cell(3, "step"), "25");
  EXPECT_EQ(cell(3, "kind"), "train");
  EXPECT_DOUBLE_EQ(std::stod(cell(3, "batch_index")), 22.0) << rows[3];  // the mean of 20..24
  EXPECT_TRUE(std::isfinite(std::stod(cell(3, "loss")))) << rows[3];
}

TEST(Cli, Sdk11PluginStateReductionsAndTheSplitStepResume) {
  // The tiny plugin as an SDK 1.1 plugin: a plain-member counter saved by
  // extra_state() and restored by load_extra_state(), values logged with
  // Reduce::kLast / kMax, and ctx.backward + ctx.step instead of optimize.
  TempDir dir;
  const std::string args =
      "' system.log_steps=true system.split_step=true trainer.log_every_n_steps=10 trainer.log_grad_norm=true ";
  auto r = run_gantry("train '" + kTiny + args + "trainer.max_steps=20", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=30 trainer.resume=auto", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto text = gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv");
  // The training rows (the final grids' sampled_at values have rows of their own).
  std::vector<std::string> rows;
  for (const auto& row : gantry::test::lines_of(text))
    if (row.find(",,,,,") == std::string::npos) rows.push_back(row);
  ASSERT_EQ(rows.size(), 4u) << text;
  const auto header = gantry::test::split(rows[0], ',');
  auto cell = [&](size_t row, const std::string& column) {
    const auto cells = gantry::test::split(rows[row], ',');
    const size_t i = std::find(header.begin(), header.end(), column) - header.begin();
    return i < cells.size() ? cells[i] : std::string("(none)");
  };
  EXPECT_EQ(cell(1, "steps_seen"), "10");  // kLast: the row's last batch, not the mean 5.5
  EXPECT_EQ(cell(2, "steps_seen"), "20");
  EXPECT_EQ(cell(3, "steps_seen"), "30") << "the counter did not come back from the checkpoint";
  for (size_t k = 1; k <= 3; ++k) {
    EXPECT_GE(std::stod(cell(k, "loss_max")), std::stod(cell(k, "loss"))) << rows[k];  // max >= mean
    EXPECT_GT(std::stod(cell(k, "grad_norm")), 0) << rows[k];
    // trainer.log_grad_norm: the same norm as the plugin's own (double sums of float
    // squares there, float norms here: ~1e-7 relative per batch).
    EXPECT_NEAR(std::stod(cell(k, "grad_norm_sgd")), std::stod(cell(k, "grad_norm")),
                1e-5 * std::stod(cell(k, "grad_norm")))
        << rows[k];
  }
}

TEST(Cli, ASystemsOwnDataTrainsWithNoFilesAndResumesExactly) {
  // SDK 1.1 train_dataset(): a ring of 8 Gaussians made by the plugin; no
  // data.path at all. Sharded, shuffled, validated, resumed mid-epoch (4096
  // samples / 32 = 128 batches an epoch; the resume is at batch 20).
  TempDir dir, again;
  const std::string args =
      "' system.synthetic=true system.pixels=2 data.path=/nonexistent data.batch_size=32 "
      "trainer.log_every_n_steps=10 checkpoint.every_n_steps=20 ";
  auto r = run_gantry("validate '" + kTiny + args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("4096 samples of its own data"), std::string::npos) << r.out;
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=-1 trainer.max_epochs=1 trainer.val_every_n_epochs=1",
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: plugin tiny's own, 4096 samples, validation 512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done at step 128 (epoch 1)"), std::string::npos) << r.out;
  const auto rows = gantry::test::lines_of(gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv"));
  ASSERT_GE(rows.size(), 3u);
  const auto header = gantry::test::split(rows[0], ',');
  auto cell = [&](const std::string& row, const std::string& column) {
    const auto cells = gantry::test::split(row, ',');
    const size_t i = std::find(header.begin(), header.end(), column) - header.begin();
    return i < cells.size() ? cells[i] : std::string();
  };
  const double first = std::stod(cell(rows[1], "loss"));
  std::string val;
  for (const auto& row : rows) val = cell(row, "val_loss").empty() ? val : cell(row, "val_loss");
  ASSERT_FALSE(val.empty()) << "no validation row";
  // The validation row at 128 and the last training row at 128 are told apart by kind.
  std::set<std::string> step_kinds;
  for (size_t k = 1; k < rows.size(); ++k) {
    EXPECT_EQ(cell(rows[k], "kind"), cell(rows[k], "val_loss").empty() ? "train" : "val") << rows[k];
    EXPECT_TRUE(step_kinds.insert(cell(rows[k], "step") + " " + cell(rows[k], "kind")).second) << rows[k];
  }
  EXPECT_EQ(step_kinds.count("128 val") + step_kinds.count("128 train"), 2u);
  EXPECT_LT(std::stod(val), first / 2) << "it did not learn the ring: loss " << first << " then val_loss " << val;
  // Resumed from the step-20 checkpoint to step 60: the same weights as straight.
  const auto ckpt = [](const std::filesystem::path& d, int step) {
    char name[64];
    std::snprintf(name, sizeof name, "runs/tiny/latest/checkpoints/step_%07d.ckpt", step);
    return (d / name).string();
  };
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=60", again.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string at20 = ckpt(again.path(), 20);
  TempDir third;
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=60 trainer.resume=" + at20, third.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  gantry::test::expect_same_weights(ckpt(again.path(), 60), ckpt(third.path(), 60));
  EXPECT_NE(r.out.find("done at step 60"), std::string::npos) << r.out;
}

TEST(Cli, AStepThatDrawsFurtherBatchesCountsStepsNotBatchesAndResumesExactly) {
  // ctx.next_batch() (SDK 1.1): 1 + 2 batches per step. 4096 / 32 = 128
  // batches an epoch make 43 steps (the last one finds 1 batch and then none).
  TempDir dir, again, third;
  const std::string args =
      "' system.synthetic=true system.pixels=2 system.extra_batches=2 data.path=/nonexistent "
      "data.batch_size=32 trainer.log_every_n_steps=10 checkpoint.every_n_steps=10 ";
  auto r = run_gantry("train '" + kTiny + args + "trainer.max_steps=-1 trainer.max_epochs=1", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 43 (epoch 1): trainer.max_epochs=1 reached"), std::string::npos) << r.out;
  const auto text = gantry::test::read_text(dir.path() / "runs/tiny/latest/metrics.csv");
  const auto rows = gantry::test::lines_of(text);
  const auto header = gantry::test::split(rows[0], ',');
  const size_t col = std::find(header.begin(), header.end(), "batches") - header.begin();
  ASSERT_LT(col, header.size()) << text;
  double total = 0;
  for (size_t k = 1; k < rows.size(); ++k) total += std::stod(gantry::test::split(rows[k], ',')[col]);
  EXPECT_EQ(total, 128) << text;  // every batch of the epoch used once (Reduce::kSum per row)
  // Resumed at step 10 (batch 30 of the epoch): the same weights at step 30.
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=30", again.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_gantry("train '" + kTiny + args + "trainer.max_steps=30 trainer.resume=" +
                     (again.path() / "runs/tiny/latest/checkpoints/step_0000010.ckpt").string(),
                 third.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string at30 = "runs/tiny/latest/checkpoints/step_0000030.ckpt";
  gantry::test::expect_same_weights((again.path() / at30).string(), (third.path() / at30).string());
}

// ---- the best checkpoints, early stopping (issue 30) -----------------------------

namespace {

// The best_step_*.ckpt of a run, by name.
std::vector<std::string> best_files(const std::filesystem::path& run) {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(run / "checkpoints"))
    if (e.path().filename().string().rfind("best_step_", 0) == 0) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(Cli, TheTwoBestCheckpointsByValLossAreKeptAndSurviveAResume) {
  // The tiny plugin on its ring, validated every 10 batches: the two lowest
  // val_loss rows' checkpoints are kept, best.ckpt links the lowest; a run
  // stopped at 30 and resumed to 60 keeps the same two as one straight run.
  const std::string args = "train '" + kTiny +
                           "' system.synthetic=true system.pixels=2 data.path=/nonexistent data.batch_size=32 "
                           "trainer.val_every_n_steps=10 checkpoint.monitor=val_loss checkpoint.save_top_k=2 "
                           "checkpoint.save_last=false ";
  TempDir straight, split;
  auto r = run_gantry(args + "trainer.max_steps=60", straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto run = straight.path() / "runs/tiny/latest";
  const auto val = gantry::test::column_by_step((run / "metrics.csv").string(), "val_loss");
  ASSERT_EQ(val.size(), 6u);
  std::vector<std::pair<double, int64_t>> ranked;
  for (const auto& [step, v] : val) ranked.emplace_back(std::stod(v), step);
  std::sort(ranked.begin(), ranked.end());
  char want[2][64];
  for (int i = 0; i < 2; ++i) std::snprintf(want[i], sizeof want[i], "best_step_%07ld.ckpt", long(ranked[i].second));
  std::vector<std::string> expected{want[0], want[1]};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(best_files(run), expected);
  EXPECT_EQ(std::filesystem::read_symlink(run / "checkpoints/best.ckpt").string(), want[0]);
  EXPECT_NE(r.out.find("best: val_loss " + val.at(ranked[0].second).substr(0, 4)), std::string::npos) << r.out;
  for (const auto& e : std::filesystem::directory_iterator(run / "checkpoints"))  // save_last=false: no step_*
    EXPECT_NE(e.path().filename().string().rfind("step_", 0), 0u) << e.path();
  r = run_gantry("sample -c " + (run / "best").string() + " -n 4 --tensors t.pt", straight.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoints/best.ckpt"), std::string::npos) << r.out;
  ASSERT_EQ(run_gantry(args + "trainer.max_steps=30", split.path()).exit_code, 0);
  r = run_gantry(args + "trainer.max_steps=60 trainer.resume=auto", split.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(best_files(split.path() / "runs/tiny/latest"), expected);
}

TEST(Cli, EarlyStoppingStopsWithTheRuleAndAResumeWithMorePatienceGoesOn) {
  // val_loss falls on the ring: with mode max it "stops improving" at once:
  // the first check (step 10) is the best, two more without improvement stop
  // the run at step 30. Resumed with patience 5 it goes on to step 60.
  const std::string common = "train '" + kTiny +
                             "' system.synthetic=true system.pixels=2 data.path=/nonexistent data.batch_size=32 "
                             "trainer.val_every_n_steps=10 trainer.max_steps=200 early_stopping.monitor=val_loss ";
  const std::string args = common + "early_stopping.mode=max ";
  TempDir dir;
  auto r = run_gantry(args + "early_stopping.patience=2", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto val = gantry::test::column_by_step((dir.path() / "runs/tiny/latest/metrics.csv").string(), "val_loss");
  ASSERT_FALSE(val.empty());
  EXPECT_NE(r.out.find("done at step 30 (epoch 0): early stopping: val_loss did not improve by 0 for 2 checks (best " +
                       val.begin()->second.substr(0, 4)),
            std::string::npos)
      << r.out;
  r = run_gantry(args + "early_stopping.patience=5 trainer.resume=auto", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 60 (epoch 0): early stopping: val_loss did not improve by 0 for 5 checks"),
            std::string::npos)
      << r.out;
  // A threshold stops at the first check; a bad value is one line.
  TempDir other;
  r = run_gantry(common + "early_stopping.stopping_threshold=100", other.path());
  EXPECT_NE(r.out.find("done at step 10 (epoch 0): early stopping: val_loss"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("reached early_stopping.stopping_threshold 100 at step 10"), std::string::npos) << r.out;
  expect_one_error_line(run_gantry(args + "early_stopping.divergence_threshold=lots", other.path()),
                        "early_stopping.divergence_threshold must be a number, or empty");
}

// ---- gantry sweep --------------------------------------------------------------

namespace {

const std::string kTinyConfig = gantry::test::source_path("tests/sdk_plugin/tiny.yaml");
std::string tiny_plugin_arg() { return " system.plugin=" + gantry::test::plugin_path("tiny"); }

// Run directories (timestamps) of a sweep point.
int runs_of(const std::filesystem::path& point) { return gantry::test::run_dirs_in(point); }

}  // namespace

// 2 x 2 points, 2 at a time: every point trains, is named by its overrides,
// and the summary ranks them; the same command again runs nothing.
TEST(Sweep, AGridRunsTwoAtATimeAndASecondRunSkipsWhatIsDone) {
  TempDir dir;
  const std::string cmd = "sweep '" + kTinyConfig + "'" + tiny_plugin_arg() +
                          " system.lr=0.05,0.1 data.batch_size=16,32 trainer.max_steps=12 --parallel 2";
  const CommandResult r = run_gantry(cmd, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("sweep: 4 points (2 axes)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best by final loss (smallest): "), std::string::npos) << r.out;
  const auto sweep_dir = dir.path() / "runs/tiny/sweep";
  const auto status = lines_of(gantry::test::read_text(sweep_dir / "sweep.tsv"));
  ASSERT_EQ(status.size(), 5u);
  EXPECT_EQ(status[1], "lr=0.05,batch_size=16\tdone");
  EXPECT_EQ(status[4], "lr=0.1,batch_size=32\tdone");
  for (const char* point :
       {"lr=0.05,batch_size=16", "lr=0.05,batch_size=32", "lr=0.1,batch_size=16", "lr=0.1,batch_size=32"}) {
    const auto rows = lines_of(gantry::test::read_text(sweep_dir / point / "latest/metrics.csv"));
    ASSERT_GE(rows.size(), 2u) << point;
    EXPECT_EQ(rows.back().rfind("12,", 0), 0u) << point << ": " << rows.back();
    // The point's own overrides reached its run.
    const std::string cfg = gantry::test::read_text(sweep_dir / point / "latest/config.yaml");
    EXPECT_NE(
        cfg.find(std::string("batch_size: ") + (std::string(point).find("16") != std::string::npos ? "16" : "32")),
        std::string::npos)
        << point;
    EXPECT_EQ(runs_of(sweep_dir / point), 1) << point;
  }
  // The four losses differ: the overrides took effect.
  std::set<std::string> finals;
  for (const auto& line : lines_of(r.out))
    if (line.rfind("lr=", 0) == 0) finals.insert(line.substr(line.rfind(' ') + 1));
  EXPECT_EQ(finals.size(), 4u) << r.out;

  const CommandResult again = run_gantry(cmd, dir.path());
  ASSERT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_NE(again.out.find("4 done already"), std::string::npos) << again.out;
  EXPECT_EQ(again.out.find("started"), std::string::npos) << again.out;
  EXPECT_EQ(runs_of(sweep_dir / "lr=0.1,batch_size=32"), 1);
}

// A point whose config is wrong is one line naming it, before anything runs.
TEST(Sweep, ABadPointIsOneLineBeforeAnythingRuns) {
  TempDir dir;
  const CommandResult r =
      run_gantry("sweep '" + kTinyConfig + "'" + tiny_plugin_arg() + " trainer.max_steps=5,0", dir.path());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("gantry sweep: point max_steps=0: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("trainer.max_steps"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "runs/tiny/sweep"));
}

// A point that fails (its data is missing) is reported with its last line;
// the others finish, the sweep exits 1, and the failed point is tried again
// next time.
TEST(Sweep, AFailedPointIsReportedAndTheOthersFinish) {
  TempDir dir;
  const std::string cmd = "sweep '" + kTinyConfig + "'" + tiny_plugin_arg() +
                          " data.path=" + gantry::test::fashion_mnist_dir() + ",/nonexistent trainer.max_steps=10";
  const CommandResult r = run_gantry(cmd, dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("sweep: path=_nonexistent: failed (exit 1): gantry: error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("best by final loss (smallest): path=_usr_share_datasets_fashion-mnist "), std::string::npos)
      << r.out;
  const auto status = lines_of(gantry::test::read_text(dir.path() / "runs/tiny/sweep/sweep.tsv"));
  ASSERT_EQ(status.size(), 3u);
  EXPECT_EQ(status[1], "path=_usr_share_datasets_fashion-mnist\tdone");
  EXPECT_EQ(status[2], "path=_nonexistent\tfailed (exit 1)");
  const CommandResult again = run_gantry(cmd, dir.path());
  EXPECT_NE(again.out.find("1 done already"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("sweep: path=_nonexistent: started"), std::string::npos) << again.out;
}

// ---- a stop by signal outside SLURM (the third fault campaign) -----------------

namespace {

// The kinds of the events a run's stream log holds, in order.
std::vector<std::string> event_kinds(const std::filesystem::path& run) {
  std::vector<std::string> kinds;
  for (const auto& f : gantry::wire::replay((run / "stream.gantrylog").string()).frames) {
    const gantry::wire::Message m = gantry::wire::decode(f);
    if (const auto* e = std::get_if<gantry::wire::Event>(&m.payload)) kinds.push_back(e->kind);
  }
  return kinds;
}

// The newest row's step of a metrics.csv (0 when none yet).
long last_step(const std::filesystem::path& csv) {
  const auto rows = lines_of(gantry::test::read_text(csv.string()));
  return rows.size() < 2 ? 0 : std::atol(rows.back().c_str());
}

// Waits until `csv` has a row at or past `step` (at most 60 s).
bool wait_for_step(const std::filesystem::path& csv, long step) {
  for (int i = 0; i < 600; ++i) {
    if (last_step(csv) >= step) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

}  // namespace

// SIGUSR1 on a run outside SLURM: nothing requeues it, so it is a stop, not
// a preemption: the checkpoint at the stop step, a "stopped" event (never
// "requeued"), one line saying how to resume, and exit 128 + 10. (It exited
// 0 with a "requeued" event, and a sweep then recorded the point as done.)
// SIGHUP (a lost terminal or ssh session) stops and saves the same way (it
// killed the run at once: no line, no checkpoint, no end event).
TEST(Cli, Sigusr1OutsideSlurmAndSighupStopAndSaveButAreNoRequeue) {
  for (const int sig : {SIGUSR1, SIGHUP}) {
    TempDir dir;
    const auto run = dir.path() / "runs/tiny/latest";
    const pid_t pid =
        gantry::test::spawn_gantry("train '" + kTiny + "' trainer.max_steps=1000000", dir.path(), dir / "train.log");
    ASSERT_TRUE(wait_for_step(run / "metrics.csv", 20)) << gantry::test::read_text(dir / "train.log");
    ::kill(pid, sig);
    int status = 0;
    ::waitpid(pid, &status, 0);
    const std::string out = gantry::test::read_text(dir / "train.log");
    ASSERT_TRUE(WIFEXITED(status)) << sig << "\n" << out;
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << out;
    EXPECT_NE(out.find("stopped at step "), std::string::npos) << out;
    if (sig == SIGUSR1) {
      EXPECT_NE(out.find("stopped by SIGUSR1 outside SLURM: nothing requeues this run; resume it with "
                         "trainer.resume=auto"),
                std::string::npos)
          << out;
    }
    EXPECT_EQ(out.find("requeued"), std::string::npos) << out;
    const auto kinds = event_kinds(run);
    ASSERT_FALSE(kinds.empty()) << sig;
    EXPECT_EQ(kinds.back(), "stopped") << sig;
    EXPECT_EQ(std::count(kinds.begin(), kinds.end(), "requeued"), 0);
    const long stopped_at = last_step(run / "metrics.csv");
    char name[64];
    std::snprintf(name, sizeof name, "step_%07ld.ckpt", stopped_at);
    EXPECT_TRUE(std::filesystem::exists(run / "checkpoints" / name)) << sig << ": " << name << "\n" << out;
  }
}

// In a sweep, a point stopped by SIGUSR1 is recorded stopped, not done, and
// not ranked; the other point finishes.
TEST(Sweep, APointStoppedBySigusr1IsNotDone) {
  TempDir dir;
  const pid_t sweep = gantry::test::spawn_gantry(
      "sweep '" + kTinyConfig + "'" + tiny_plugin_arg() + " trainer.max_steps=1000000,40 --parallel 2", dir.path(),
      dir / "sweep.log");
  const auto sweep_dir = dir.path() / "runs/tiny/sweep";
  ASSERT_TRUE(wait_for_step(sweep_dir / "max_steps=1000000/latest/metrics.csv", 20))
      << gantry::test::read_text(dir / "sweep.log");
  pid_t long_point = 0;
  for (const auto& [pid, rank] : gantry::test::children_of(sweep)) {
    std::string cmdline = gantry::test::read_text("/proc/" + std::to_string(pid) + "/cmdline");
    if (cmdline.find("trainer.max_steps=1000000") != std::string::npos) long_point = pid;
  }
  ASSERT_GT(long_point, 0) << gantry::test::read_text(dir / "sweep.log");
  ::kill(long_point, SIGUSR1);
  int status = 0;
  ::waitpid(sweep, &status, 0);
  const std::string out = gantry::test::read_text(dir / "sweep.log");
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << out;
  const auto tsv = lines_of(gantry::test::read_text(sweep_dir / "sweep.tsv"));
  ASSERT_EQ(tsv.size(), 3u) << out;
  EXPECT_EQ(tsv[1], "max_steps=1000000\tstopped (SIGUSR1)") << out;
  EXPECT_EQ(tsv[2], "max_steps=40\tdone") << out;
  EXPECT_NE(out.find("best by final loss (smallest): max_steps=40 "), std::string::npos) << out;
}

// A checkpoint's temp file left by a writer that is gone (Ctrl-C twice during
// the final checkpoint: 24 MB that outlived resume=auto and keep_last) is
// removed when the run directory is used again, saying so; a live writer's is not.
TEST(Cli, AResumedRunRemovesTheTempFilesOfDeadWriters) {
  TempDir dir;
  ASSERT_EQ(run_gantry("train '" + kTiny + "' trainer.max_steps=10", dir.path()).exit_code, 0);
  const auto ckpts = dir.path() / "runs/tiny/latest/checkpoints";
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  const auto stale = ckpts / ("step_0000010.ckpt.tmp." + std::to_string(dead));
  const auto live = ckpts / ("step_0000010.ckpt.tmp." + std::to_string(::getpid()));
  gantry::test::write_text(stale.string(), "half a checkpoint");
  gantry::test::write_text(live.string(), "being written");
  const auto r = run_gantry("train '" + kTiny + "' trainer.max_steps=20 trainer.resume=auto", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(stale));
  EXPECT_TRUE(std::filesystem::exists(live));
  bool said = false;
  for (const auto& line : lines_of(r.out))
    said |= line.rfind("removed ", 0) == 0 &&
            line.find("/checkpoints/" + stale.filename().string() +
                      ": an unfinished write of a process that is gone") != std::string::npos;
  EXPECT_TRUE(said) << r.out;
}

// Third fault campaign: /dev/zero as config grew to 2.1 GB and kept going, a
// FIFO blocked forever, a directory gave CLI11's text and exit 105, and
// `gantry sample -c /dev/zero` ate 1.87 GB. Each is one line now, at once,
// and the line is the first thing on stderr (no blank line before it).
TEST(Cli, ConfigsAndCheckpointsThatAreNoRegularFilesAreOneLine) {
  TempDir dir;
  ASSERT_EQ(::mkfifo((dir / "fifo.yaml").c_str(), 0600), 0);
  const std::string big(17u << 20, '#');
  write_text(dir / "big.yaml", big);
  const auto start = std::chrono::steady_clock::now();
  for (const auto& [args, what] : std::vector<std::pair<std::string, std::string>>{
           {"train /dev/zero", "/dev/zero: a character device, not a config file"},
           {"validate fifo.yaml", "fifo.yaml: a FIFO, not a config file"},
           {"train .", ".: a directory, not a config file"},
           {"launch -n 2 /dev/zero", "/dev/zero: a character device, not a config file"},
           {"train big.yaml", "big.yaml: 17.0 MiB, more than the 16.0 MiB a config file may be"},
           {"train missing.yaml", "missing.yaml: cannot open the config file: No such file or directory"},
           {"sample -c /dev/zero", "/dev/zero: a character device, not a checkpoint"},
           {"sample -c .", ".: no valid checkpoint in it (a checkpoint, a run or an experiment directory)"}}) {
    const auto r = run_gantry(args, dir.path(), "timeout 60");
    expect_one_error_line(r, what);
    EXPECT_EQ(r.err.rfind("gantry: error: ", 0), 0u) << "not the first thing on stderr:\n" << r.err;
  }
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 30.0);
}

TEST(Cli, ARepeatedOverrideIsAnErrorAsADuplicateYamlKeyIs) {
  TempDir dir;
  expect_one_error_line(run_gantry("validate '" + kDemo + "' trainer.max_steps=10 trainer.max_steps=20", dir.path()),
                        "command line: 'trainer.max_steps' is given twice ('trainer.max_steps=10', then "
                        "'trainer.max_steps=20'): give each key once");
}

// A plugin built for aarch64 said "No such file or directory" for a file that
// exists; a library whose static initializer crashes took `gantry plugins`
// down with it (139).
TEST(Cli, APluginForAnotherMachineOrOneThatCrashesOnLoadIsNamed) {
  TempDir dir;
  std::string elf = gantry::test::read_text(gantry::test::plugin_path("tiny"));
  ASSERT_GT(elf.size(), 20u);
  elf[18] = '\xb7';  // e_machine = EM_AARCH64 (183)
  elf[19] = '\0';
  write_text(dir / "libarm.so", elf);
  expect_one_error_line(
      run_gantry("validate '" + kDemo + "' system.plugin=" + (dir / "libarm.so"), dir.path()),
      "libarm.so is an ELF for aarch64 (64-bit), this gantry runs on x86-64: build it for this machine");
  const auto r =
      run_gantry("plugins", dir.path(), "GANTRY_PLUGIN_PATH='" + std::string(GANTRY_TEST_PLUGIN_DIR) + "/crashing'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("libcrash_on_load.so"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("error: loading it crashed the process (signal 11, SIGSEGV, in its static initializers)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("gan 0.1.0 (ABI 1.3"), std::string::npos) << "the plugins after it were not listed\n" << r.out;
}

// Every checkpoint unreadable: resume=auto said "no checkpoint yet" and
// trained again from step 0. Now it refuses; trainer.resume=fresh starts over.
TEST(Cli, AutoResumeRefusesWhenEveryCheckpointIsUnreadable) {
  TempDir dir;
  ASSERT_EQ(run_gantry("train '" + kTiny + "' trainer.max_steps=20 checkpoint.every_n_steps=10", dir.path()).exit_code,
            0);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "runs/tiny/latest/checkpoints")) {
    write_text(e.path().string(), "not a checkpoint any more");
    ++n;
  }
  ASSERT_GE(n, 1);
  auto r = run_gantry("train '" + kTiny + "' trainer.max_steps=40 trainer.resume=auto", dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("trainer.resume=auto: every checkpoint in runs/tiny is unreadable (" + std::to_string(n) +
                       (n == 1 ? " file" : " files") + ", see the warnings above)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.out.find("done at step"), std::string::npos) << r.out;
  r = run_gantry("train '" + kTiny + "' trainer.max_steps=40 trainer.resume=fresh", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 40"), std::string::npos) << r.out;
}

// trainer.max_time counted per process: a run stopped and resumed got the
// whole time again. It counts the fit time of every run of the training now
// (as Lightning's Timer keeps time_elapsed in its checkpoint state).
TEST(Cli, MaxTimeCountsTheFitTimeOfEveryRunOfATraining) {
  TempDir dir;
  const std::string args = "train '" + kTiny + "' trainer.max_steps=-1 trainer.max_epochs=-1 trainer.max_time=2";
  auto r = run_gantry(args, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto at = r.out.find("done at step ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const long first = std::atol(r.out.c_str() + at + 13);
  EXPECT_NE(r.out.find("trainer.max_time=2 reached"), std::string::npos) << r.out;
  ASSERT_GT(first, 10);
  // The time is used up: the resumed run stops after its first batch (or the
  // agreement's one more), not 2 s (hundreds of batches) later.
  r = run_gantry(args + " trainer.resume=auto", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto again = r.out.find("done at step ");
  ASSERT_NE(again, std::string::npos) << r.out;
  const long second = std::atol(r.out.c_str() + again + 13);
  EXPECT_LE(second - first, 2) << r.out;
  EXPECT_NE(r.out.find("trainer.max_time=2 reached"), std::string::npos) << r.out;
}

// Ctrl-C twice during the final checkpoint left a 24 MB step_*.ckpt.tmp.*
// behind (the next start removes such files; issue 27 item 9). The second
// Ctrl-C now removes the file being written before it exits.
TEST(Files, ASecondCtrlCDuringAnAtomicWriteLeavesNoTempFile) {
  TempDir dir;
  const std::string path = dir / "step_0000100.ckpt";
  const pid_t child = ::fork();
  if (child == 0) {
    gantry::install_stop_signals();
    const std::string bytes(size_t{768} << 20, 'x');  // long enough to be caught mid-write
    gantry::write_file_atomic(path, bytes);
    ::_exit(0);
  }
  const std::string tmp = path + ".tmp." + std::to_string(child);
  for (int i = 0; i < 20000 && !std::filesystem::exists(tmp); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_TRUE(std::filesystem::exists(tmp)) << "the write never started";
  ::kill(child, SIGINT);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // two signals, not one merged
  ::kill(child, SIGINT);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 130) << "the write finished before the second Ctrl-C: nothing tested";
  EXPECT_FALSE(std::filesystem::exists(tmp));
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Checkpoints name the plugin by absolute path: after moving the build
// directory, `gantry sample` failed with "no such file" and no hint (issue
// 28, item 9). The plugin of the checkpoint's name on the search path is
// used, said in a line; --plugin names another; the error names both ways.
TEST(Cli, SampleFindsAMovedPluginByNameOrTakesPlugin) {
  namespace fs = std::filesystem;
  TempDir dir;
  fs::create_directories(dir.path() / "a");
  fs::copy_file(gantry::test::gan_plugin_path(), dir.path() / "a/libgan.so");
  fs::copy_file(gantry::test::plugin_path("tiny"), dir.path() / "a/libtiny.so");
  ASSERT_EQ(run_gantry("train '" + kDemo + "' trainer.max_steps=2 system.plugin=" + (dir / "a/libgan.so"), dir.path())
                .exit_code,
            0);
  ASSERT_EQ(run_gantry("train '" + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
                           "' trainer.max_steps=2 name=moved system.plugin=" + (dir / "a/libtiny.so"),
                       dir.path())
                .exit_code,
            0);
  fs::rename(dir.path() / "a", dir.path() / "b");
  const std::string gan_ckpt = (dir.path() / "runs/gan_fashion_mnist/latest/checkpoints/step_0000002.ckpt").string();
  const std::string tiny_ckpt = (dir.path() / "runs/moved/latest/checkpoints/step_0000002.ckpt").string();
  auto r =
      run_gantry("sample -c " + gan_ckpt + " -n 4 -o s.png", dir.path(), "GANTRY_PLUGIN_PATH='" + (dir / "b") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("plugin gan: " + (dir / "a/libgan.so") + " (recorded in the checkpoint) is gone; using " +
                       (dir / "b/libgan.so") + " from the plugin search path"),
            std::string::npos)
      << r.out;
  expect_one_error_line(run_gantry("sample -c " + tiny_ckpt + " --tensors t.pt", dir.path()),
                        "was written with plugin tiny from " + (dir / "a/libtiny.so") +
                            ", which is gone, and no libtiny.so is on the plugin search path");
  r = run_gantry("sample -c " + tiny_ckpt + " --tensors t.pt --plugin " + (dir / "b/libtiny.so"), dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_TRUE(fs::exists(dir.path() / "t.pt"));
  // Issue 28, item 10: --rows lays the grid out; --labels asks a conditional
  // system (SDK 1.3 conditional_input) for classes, cycled over the samples
  // (the tiny plugin writes the class into each input's first value).
  const std::string path = "GANTRY_PLUGIN_PATH='" + (dir / "b") + "'";
  r = run_gantry("sample -c " + gan_ckpt + " -n 16 --rows 4 -o rows.png", dir.path(), path);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto grid = gantry::decode_png(gantry::test::read_text(dir / "rows.png"));
  EXPECT_EQ(grid.width, 4 * 30 + 2);
  EXPECT_EQ(grid.height, 4 * 30 + 2);
  expect_one_error_line(run_gantry("sample -c " + gan_ckpt + " --labels 1", dir.path(), path),
                        "--labels: plugin gan is not conditional");
  r = run_gantry("sample -c " + tiny_ckpt + " -n 5 --labels 3,1 --tensors c.pt --plugin " + (dir / "b/libtiny.so"),
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string bytes = gantry::test::read_text(dir / "c.pt");
  const auto d = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end())).toGenericDict();
  const torch::Tensor first = d.at("input").toTensor().select(1, 0);
  EXPECT_TRUE(torch::equal(first, torch::tensor({3.f, 1.f, 3.f, 1.f, 3.f}))) << first;
}
