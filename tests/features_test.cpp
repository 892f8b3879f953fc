// Training features a user turns on from the command line, run as a user
// would: gradient accumulation (one and two ranks, through a resume),
// fast_dev_run and the batch limits, the profiler's table and trace, the
// throughput columns.
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
using gantry::test::kTiny;
using gantry::test::lines_of;
using gantry::test::run_gantry;
using gantry::test::TempDir;
using gantry::test::write_text;

// ---- gradient accumulation, quick iteration ------------------------------------

namespace {

// Every parameter and buffer of a checkpoint, flattened into one tensor.
torch::Tensor weights_of(const std::filesystem::path& ckpt) {
  std::vector<torch::Tensor> all;
  for (const auto& e : gantry::test::state_dict_of(ckpt.string())) all.push_back(e.value().toTensor().flatten());
  return torch::cat(all);
}

const std::string kRing = "' system.synthetic=true system.pixels=2 data.path=/nonexistent ";

}  // namespace

TEST(Accumulation, FourBatchesOf16StepLikeOneOf64OnOneAndTwoRanks) {
  // The tiny plugin is a linear softmax classifier (a convex loss) trained
  // with SGD. The loader's order does not depend on the batch size, so 4
  // batches of 16 are the 64 samples of one batch of 64; each loss divided by
  // 4, their gradients sum to the same mean, in another order of the sums:
  // float32 rounding, ~1e-7 relative a step, stays far below 1e-5 of the
  // weights after 8 steps. Without accumulation, 32 steps of 16 land elsewhere.
  for (const std::string launch : {"train '", "launch -n 2 '"}) {
    TempDir big, accumulated, small;
    const std::string args = launch + kTiny + kRing + "system.lr=0.5 ";
    auto r = run_gantry(args + "data.batch_size=64 trainer.max_steps=8", big.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    r = run_gantry(args + "data.batch_size=16 trainer.max_steps=32 trainer.accumulate_grad_batches=4",
                   accumulated.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    if (launch != "train '") {
      EXPECT_NE(r.out.find("replicas bit-identical across 2 ranks"), std::string::npos) << r.out;
    }
    r = run_gantry(args + "data.batch_size=16 trainer.max_steps=32", small.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const auto w64 = weights_of(big.path() / "runs/tiny/latest/checkpoints/step_0000008.ckpt");
    const auto w16x4 = weights_of(accumulated.path() / "runs/tiny/latest/checkpoints/step_0000032.ckpt");
    const auto w16 = weights_of(small.path() / "runs/tiny/latest/checkpoints/step_0000032.ckpt");
    const double scale = w64.abs().max().item<double>();
    const double same = (w16x4 - w64).abs().max().item<double>();
    const double other = (w16 - w64).abs().max().item<double>();
    std::cout << launch << ": |w| " << scale << ", accumulated vs 64 " << same << ", 32 steps of 16 vs 64 " << other
              << "\n";
    EXPECT_LT(same, 1e-5 * scale) << launch;
    EXPECT_GT(other, 1e-2 * scale) << launch;
  }
}

TEST(Accumulation, AResumeMidAccumulationContinuesBitForBitOnTwoRanks) {
  // 4 batches an optimizer step; checkpoints at steps 5 and 10, each one
  // batch (5) or two (10) into an accumulation: the summed gradients go into
  // the checkpoint (averaged over the ranks) and a resume from step 5 ends
  // at step 10 with the weights of the run that went straight through.
  TempDir straight, resumed;
  const std::string args = "launch -n 2 '" + kTiny + kRing +
                           "data.batch_size=16 trainer.max_steps=10 trainer.accumulate_grad_batches=4 "
                           "checkpoint.every_n_steps=5";
  auto r = run_gantry(args, straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto ckpts = straight.path() / "runs/tiny/latest/checkpoints";
  EXPECT_NE(gantry::test::read_text(ckpts / "step_0000005.ckpt").find("accumulate.sgd.micro"), std::string::npos);
  r = run_gantry(args + " trainer.resume=" + (ckpts / "step_0000005.ckpt").string(), resumed.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  gantry::test::expect_same_weights((ckpts / "step_0000010.ckpt").string(),
                                    (resumed.path() / "runs/tiny/latest/checkpoints/step_0000010.ckpt").string());
}

TEST(Accumulation, TheTwoOptimizerGanAccumulatesAndResumesMidAccumulationExactly) {
  // Lightning refuses accumulation with manual optimization; the GAN steps G
  // and D itself. k=2: the run differs from k=1, and a resume from step 3
  // (one batch into an accumulation) ends at step 5 bit for bit like the
  // straight run.
  TempDir plain, straight, resumed;
  const std::string args = "train '" + kDemo +
                           "' trainer.progress=none monitor.enabled=false data.batch_size=16 trainer.max_steps=5 "
                           "checkpoint.every_n_steps=3";
  auto r = run_gantry(args, plain.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_gantry(args + " trainer.accumulate_grad_batches=2", straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto ckpts = straight.path() / "runs/gan_fashion_mnist/latest/checkpoints";
  r = run_gantry(args + " trainer.accumulate_grad_batches=2 trainer.resume=" + (ckpts / "step_0000003.ckpt").string(),
                 resumed.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  gantry::test::expect_same_weights(
      (ckpts / "step_0000005.ckpt").string(),
      (resumed.path() / "runs/gan_fashion_mnist/latest/checkpoints/step_0000005.ckpt").string());
  EXPECT_FALSE(torch::equal(weights_of(ckpts / "step_0000005.ckpt"),
                            weights_of(plain.path() / "runs/gan_fashion_mnist/latest/checkpoints/step_0000005.ckpt")));
}

TEST(Cli, FastDevRunRunsEveryHookInAScratchDirectoryAndReportsTheirTimes) {
  TempDir dir;
  const std::string args = "train '" + kTiny + kRing + "data.batch_size=32 ";
  auto r = run_gantry(args + "trainer.fast_dev_run=true", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("fast_dev_run: 1 batch of training, one validation pass"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fast_dev_run: every hook ran without an error in"), std::string::npos) << r.out;
  auto calls = [&](const std::string& hook) {  // the report's calls column for a hook, -1 when not listed
    for (const auto& line : lines_of(r.out))
      if (line.rfind("  " + hook + " ", 0) == 0) return std::stol(line.substr(2 + 24));
    return -1L;
  };
  EXPECT_EQ(calls("training_step"), 1) << r.out;
  EXPECT_EQ(calls("validation_step"), 1) << r.out;
  EXPECT_EQ(calls("on_validation_end"), 1) << r.out;
  EXPECT_EQ(calls("log_samples"), 2) << "at the start and the end\n" << r.out;
  EXPECT_EQ(calls("(checkpoint writes)"), 1) << r.out;
  // The scratch directory is gone, and nothing was written where the user runs.
  const auto at = r.out.find("one checkpoint in ");
  ASSERT_NE(at, std::string::npos);
  const std::string scratch = r.out.substr(at + 18, r.out.find(" (removed after)", at) - at - 18);
  EXPECT_NE(scratch.find("gantry-fast-dev-run-"), std::string::npos) << scratch;
  EXPECT_FALSE(std::filesystem::exists(scratch)) << scratch;
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "runs"));
  // n batches; validation off by limit_val_batches=0.
  r = run_gantry(args + "trainer.fast_dev_run=3 trainer.limit_val_batches=0", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(calls("training_step"), 3) << r.out;
  EXPECT_EQ(calls("validation_step"), -1) << r.out;
  EXPECT_NE(r.out.find("validation_step: not called"), std::string::npos) << r.out;
}

TEST(Cli, LimitsCutEachEpochAndOverfittingRepeatsItsFirstBatches) {
  // The ring: 4096 samples, 128 batches of 32 an epoch, 16 of validation.
  TempDir dir;
  const std::string args =
      "train '" + kTiny + kRing + "data.batch_size=32 trainer.max_steps=-1 trainer.val_every_n_epochs=1 ";
  auto r = run_gantry(args + "trainer.max_epochs=2 trainer.limit_train_batches=0.25 trainer.limit_val_batches=2",
                      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 64 (epoch 2): trainer.max_epochs=2 reached"), std::string::npos) << r.out;
  auto val = gantry::test::column_by_step((dir.path() / "runs/tiny/latest/metrics.csv").string(), "val_batches");
  EXPECT_EQ(val, (std::map<int64_t, std::string>{{32, "2"}, {64, "2"}}));
  r = run_gantry(args + "trainer.max_epochs=4 trainer.overfit_batches=3", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 12 (epoch 4): trainer.max_epochs=4 reached"), std::string::npos) << r.out;
  val = gantry::test::column_by_step((dir.path() / "runs/tiny/latest/metrics.csv").string(), "val_batches");
  EXPECT_EQ(val.size(), 4u);
  EXPECT_EQ(val[12], "3") << "validation on at most as many batches as the overfitting trains on";
}

// trainer.profiler=simple on 2 ranks: one table at the end, every part with
// rank 0's calls (the GAN: 2 backward and 2 optimizer steps a batch), the
// slowest rank named, top-level shares that add up to the fit, and the same
// table in profile.txt.
TEST(Profiler, SimpleTablesEachPartOverTheRanksWithTheSlowestNamed) {
  TempDir dir;
  auto r = run_gantry("launch -n 2 '" + kDemo +
                          "' trainer.progress=none monitor.enabled=false data.batch_size=16 trainer.max_steps=20 "
                          "trainer.profiler=simple",
                      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  ASSERT_NE(r.out.find("profile (trainer.profiler: simple): 2 ranks, fit "), std::string::npos) << r.out;
  std::map<std::string, std::vector<std::string>> rows;  // name -> calls, mean ms, total s, share, slowest
  double top_share = 0;
  for (std::string line : lines_of(r.out)) {
    if (line.rfind("[rank 0] ", 0) == 0) line.erase(0, 9);  // gantry launch's prefix
    if (line.size() < 79 || line.rfind("  ", 0) != 0 || line.find('%') == std::string::npos) continue;
    std::string name = line.substr(2, 38);
    name.erase(name.find_last_not_of(' ') + 1);
    std::vector<std::string> cols;
    std::istringstream rest(line.substr(40));
    for (std::string c; rest >> c;) cols.push_back(c);
    if (name.rfind("  ", 0) != 0) top_share += std::stod(line.substr(2 + 38 + 9 + 11 + 11 + 1, 6));  // "%6.1f%%"
    rows[name] = cols;
  }
  for (const char* part :
       {"waiting for data", "training_step", "  backward", "  gradient all-reduce wait", "  optimizer step",
        "metrics read + stop agreement", "callback: checkpoint", "callback: metrics",
        "  the plugin's own work (the rest)", "the loop's own work (the rest)", "  log_samples"})
    EXPECT_TRUE(rows.count(part)) << part << "\n" << r.out;
  EXPECT_EQ(rows["training_step"].at(0), "20") << r.out;
  EXPECT_EQ(rows["  backward"].at(0), "40") << "two optimizers a batch\n" << r.out;
  EXPECT_EQ(rows["  optimizer step"].at(0), "40") << r.out;
  EXPECT_EQ(rows["training_step"].at(4), "rank") << "the slowest rank is named\n" << r.out;
  EXPECT_NEAR(top_share, 100.0, 0.6) << "the top-level parts are the whole fit\n" << r.out;
  const std::string table =
      gantry::test::read_text((dir.path() / "runs/gan_fashion_mnist/latest/profile.txt").string());
  EXPECT_NE(table.find("  training_step "), std::string::npos) << table;
  EXPECT_NE(table.find("(the rest)"), std::string::npos) << table;
}

// trainer.profiler=trace: LibTorch's profiler over rank 0's steps [2, 5): a
// JSON trace (parsed by Python's json) holding the plugin's ops (the MLPs'
// matmuls, forward and backward) and gantry's ranges, one training_step range
// per traced batch; the steps outside it are not recorded.
TEST(Profiler, TraceHoldsThePluginsOpsAndGantrysRangesForTheChosenSteps) {
  TempDir dir;
  auto r = run_gantry("train '" + kDemo +
                          "' trainer.progress=none monitor.enabled=false data.batch_size=16 trainer.max_steps=8 "
                          "trainer.profiler=trace trainer.profile_first_step=2 trainer.profile_steps=3",
                      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto trace = dir.path() / "runs/gan_fashion_mnist/latest/trace_steps_2-5.json";
  EXPECT_NE(r.out.find("profiler: steps [2, 5) of rank 0 traced"), std::string::npos) << r.out;
  ASSERT_TRUE(std::filesystem::exists(trace)) << r.out;
  const std::string script =
      "import json, sys, collections\n"
      "t = json.load(open(sys.argv[1]))\n"
      "ev = t['traceEvents'] if isinstance(t, dict) else t\n"
      "names = collections.Counter(e.get('name', '') for e in ev if e.get('ph') in ('X', 'B'))\n"
      "print('ranges', names['gantry: training_step'], names['gantry: waiting for data'], "
      "names['gantry:   backward'], names['gantry:   optimizer step'])\n"
      "print('mm', sum(n for k, n in names.items() if k in ('aten::addmm', 'aten::mm')))\n";
  gantry::test::write_text((dir.path() / "check.py").string(), script);
  const auto check =
      gantry::test::run_command("python3 '" + (dir.path() / "check.py").string() + "' '" + trace.string() + "'");
  ASSERT_EQ(check.exit_code, 0) << check.out << check.err;
  // One rank: the fused Adam steps inside backward (no optimizer step range).
  EXPECT_NE(check.out.find("ranges 3 3 6 0"), std::string::npos) << check.out;
  const auto mm = check.out.find("mm ");
  ASSERT_NE(mm, std::string::npos);
  // 3 batches x (G: 4 linear layers, D: 3) forward and their backward's matmuls: dozens.
  EXPECT_GT(std::stol(check.out.substr(mm + 3)), 3 * 7) << check.out;
}

// trainer.log_throughput: every row has samples/s and batches/s of the ranks
// together (batches x 16 x 2 per second), and after the counted second batch
// FLOP/s and MFU. The FLOP count is the MLPs' matmuls (G 100-128-256-512-
// 1024-784, D 784-512-256-1), per sample in multiply-adds: forward G + 3 D
// (D on the fakes twice, the reals once); the G step's backward: D's input
// gradients (D) and G's weight and input gradients (2 G less the first
// layer's input); the D step's: its weights twice (2 D) and its inputs but
// the first layer twice: 3 G + 8 D - 100*128 - 2*784*512, 15.9 MFLOP a sample
// (bench/run.sh's figure). The counter also counts elementwise adds and
// muls: within 2%.
TEST(Throughput, RowsHoldSamplesFlopsAndMfuOnTwoRanks) {
  TempDir dir;
  auto r = run_gantry("launch -n 2 '" + kDemo +
                          "' trainer.progress=none monitor.enabled=false data.batch_size=16 trainer.max_steps=40 "
                          "trainer.log_every_n_steps=10 trainer.log_throughput=true",
                      dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("throughput: peak "), std::string::npos) << r.out;
  const auto at = r.out.find("throughput: one batch of rank 0 is ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const double gflop = std::stod(r.out.substr(at + 35));
  const std::string csv = (dir.path() / "runs/gan_fashion_mnist/latest/metrics.csv").string();
  const auto samples = gantry::test::column_by_step(csv, "samples_per_sec");
  const auto batches = gantry::test::column_by_step(csv, "batches_per_sec");
  const auto mfu = gantry::test::column_by_step(csv, "mfu");
  for (int64_t step : {10, 20, 30, 40}) {
    ASSERT_TRUE(samples.count(step) && batches.count(step)) << step;
    EXPECT_NEAR(std::stod(samples.at(step)), 32 * std::stod(batches.at(step)), 1e-3 * std::stod(samples.at(step)));
    ASSERT_TRUE(mfu.count(step)) << step;
    EXPECT_GT(std::stod(mfu.at(step)), 0);
    EXPECT_LT(std::stod(mfu.at(step)), 1);
  }
  const double g = 100 * 128 + 128 * 256 + 256 * 512 + 512 * 1024 + 1024 * 784, d = 784 * 512 + 512 * 256 + 256 * 1;
  const double matmuls = 2 * 16 * (3 * g + 8 * d - 100 * 128 - 2 * 784 * 512);
  EXPECT_NEAR(gflop * 1e9, matmuls, 0.02 * matmuls);
}
