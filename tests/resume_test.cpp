// A run survives being killed: SIGKILL right after a checkpoint, then
// trainer.resume=auto, ends bit-identical to an uninterrupted run, with the
// same losses and a metrics.csv with no duplicated or missing step; for 1 rank
// and for 2 ranks. Plus checksums, keep_last and SIGKILL during a write.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

#include <torch/torch.h>

#include "checkpoint/file.hpp"
#include "gantry/errors.hpp"
#include "support.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::kDemo;
using gantry::test::state_dict_of;
using gantry::test::TempDir;

namespace {

// metrics.csv without the wall_time column.
std::vector<std::string> metric_rows(const std::string& csv) {
  std::vector<std::string> rows;
  for (const auto& line : gantry::test::lines_of(gantry::test::read_text(csv))) {
    std::vector<std::string> cells;
    std::stringstream ss(line);
    std::string c;
    while (std::getline(ss, c, ',')) cells.push_back(c);
    cells.erase(cells.begin() + 2);
    std::string joined;
    for (const auto& x : cells) joined += x + ",";
    rows.push_back(joined);
  }
  return rows;
}

void kill_tree(pid_t root) {
  for (const auto& [pid, rank] : gantry::test::children_of(root)) ::kill(pid, SIGKILL);
  ::kill(root, SIGKILL);
}

// Runs `verb` (train or launch -n 2) straight to 200 steps, and again killed by
// SIGKILL right after its step-100 checkpoint then resumed; compares the two.
void check_kill_and_resume(const std::string& verb) {
  const std::string args = verb + " '" + kDemo +
                           "' trainer.max_steps=200 checkpoint.every_n_steps=100 "
                           "trainer.log_every_n_steps=1 trainer.image_every_n_steps=0 "
                           "data.batch_size=32 trainer.threads=1";
  TempDir straight, killed;
  const auto a = gantry::test::run_gantry(args, straight.path());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;

  const pid_t pid = gantry::test::spawn_gantry(args, killed.path(), killed / "first.log");
  const auto exp = killed.path() / "runs/gan_fashion_mnist";
  bool seen = false;
  for (int i = 0; i < 6000 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::error_code ec;
    seen = std::filesystem::exists(exp / "latest/checkpoints/step_0000100.ckpt", ec);
  }
  kill_tree(pid);
  ::waitpid(pid, nullptr, 0);
  ASSERT_TRUE(seen) << gantry::test::read_text(killed / "first.log");
  ASSERT_FALSE(std::filesystem::exists(exp / "latest/checkpoints/step_0000200.ckpt"))
      << "the first run finished before it was killed";

  const auto b = gantry::test::run_gantry(args + " trainer.resume=auto", killed.path());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("resume: "), std::string::npos) << b.out;
  EXPECT_NE(b.out.find("step_0000100.ckpt"), std::string::npos) << b.out;

  const auto sa =
      state_dict_of((straight.path() / "runs/gan_fashion_mnist/latest/checkpoints/step_0000200.ckpt").string());
  const auto sb = state_dict_of((exp / "latest/checkpoints/step_0000200.ckpt").string());
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& e : sa)
    EXPECT_TRUE(torch::equal(e.value().toTensor(), sb.at(e.key()).toTensor())) << e.key().toStringRef();
  // Same losses at every step, each step exactly once (the resumed run continued the same run directory).
  const auto ra = metric_rows((straight.path() / "runs/gan_fashion_mnist/latest/metrics.csv").string());
  const auto rb = metric_rows((exp / "latest/metrics.csv").string());
  ASSERT_EQ(ra.size(), 201u);
  EXPECT_EQ(ra, rb);
}

}  // namespace

TEST(Resume, KilledAfterCheckpointThenResumedIsBitIdentical_OneRank) { check_kill_and_resume("train"); }

TEST(Resume, KilledAfterCheckpointThenResumedIsBitIdentical_TwoRanks) { check_kill_and_resume("launch -n 2"); }

TEST(Resume, AutoSkipsACorruptNewestCheckpointWithAWarning) {
  TempDir dir;
  const std::string args = "train '" + kDemo + "' checkpoint.every_n_steps=10 trainer.image_every_n_steps=0";
  ASSERT_EQ(gantry::test::run_gantry(args + " trainer.max_steps=20", dir.path()).exit_code, 0);
  const auto ckpts = dir.path() / "runs/gan_fashion_mnist/latest/checkpoints";
  // Flip one byte in the middle of the newest checkpoint (inside tensor data).
  std::string bytes = gantry::test::read_text((ckpts / "step_0000020.ckpt").string());
  bytes[bytes.size() / 2] ^= 0x40;
  gantry::test::write_text((ckpts / "step_0000020.ckpt").string(), bytes);
  try {
    read_checkpoint_meta((ckpts / "step_0000020.ckpt").string());
    FAIL() << "corruption not detected";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt: checksum"), std::string::npos) << e.what();
  }
  const auto r = gantry::test::run_gantry(args + " trainer.max_steps=30 trainer.resume=auto", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: skipping checkpoint"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("step_0000010.ckpt"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done at step 30"), std::string::npos) << r.out;
}

TEST(Resume, KeepLastPrunesOldCheckpoints) {
  TempDir dir;
  ASSERT_EQ(gantry::test::run_gantry("train '" + kDemo +
                                         "' trainer.max_steps=50 checkpoint.every_n_steps=10 "
                                         "checkpoint.keep_last=2 trainer.image_every_n_steps=0",
                                     dir.path())
                .exit_code,
            0);
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir.path() / "runs/gan_fashion_mnist/latest/checkpoints"))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_0000040.ckpt", "step_0000050.ckpt"}));
  // The default keeps the newest 3 (a run's every checkpoint filled disks).
  TempDir other;
  ASSERT_EQ(gantry::test::run_gantry(
                "train '" + kDemo + "' trainer.max_steps=50 checkpoint.every_n_steps=10 trainer.image_every_n_steps=0",
                other.path())
                .exit_code,
            0);
  names.clear();
  for (const auto& e : std::filesystem::directory_iterator(other.path() / "runs/gan_fashion_mnist/latest/checkpoints"))
    names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_0000030.ckpt", "step_0000040.ckpt", "step_0000050.ckpt"}));
}

// A resume compares its config with the checkpoint's: a changed lr is
// applied and said (it was silently the checkpoint's), a longer run says how a
// cosine schedule is reshaped, config.yaml is what runs now and
// config_history.yaml keeps both starts.
TEST(Resume, AChangedConfigIsAppliedAndSaidAndTheHistoryKept) {
  TempDir dir;
  const std::string base = "train '" + kDemo +
                           "' trainer.image_every_n_steps=0 trainer.log_every_n_steps=5 optimizers.g.warmup=1 "
                           "optimizers.d.scheduler=cosine";
  ASSERT_EQ(gantry::test::run_gantry(base + " trainer.max_steps=10", dir.path()).exit_code, 0);
  const auto r =
      gantry::test::run_gantry(base + " trainer.max_steps=20 trainer.resume=auto system.lr=0.00005", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resume: system.lr 0.0002 -> 0.00005"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resume: trainer.max_steps 10 -> 20"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resume: optimizer g's lr 0.0002 -> 5e-05"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("resume: optimizer d's cosine schedule now ends at step 20 (it ended at 10)"), std::string::npos)
      << r.out;
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  // lr-g (warm-up 1, then the base): 2e-4 before the resume, 5e-5 after.
  const auto lr_g = gantry::test::column_by_step(run / "metrics.csv", "lr-g");
  EXPECT_NEAR(std::stod(lr_g.at(10)), 0.0002, 1e-12);
  EXPECT_NEAR(std::stod(lr_g.at(15)), 0.00005, 1e-12);
  EXPECT_NEAR(std::stod(lr_g.at(20)), 0.00005, 1e-12);
  EXPECT_NE(gantry::test::read_text(run / "config.yaml").find("lr: 0.00005"), std::string::npos);
  const std::string history = gantry::test::read_text(run / "config_history.yaml");
  EXPECT_NE(history.find(": a fresh run\n"), std::string::npos) << history;
  EXPECT_NE(history.find("changed: system.lr 0.0002 -> 0.00005, trainer.max_steps 10 -> 20"), std::string::npos)
      << history;
  EXPECT_NE(history.find("lr: 0.0002"), std::string::npos) << history;
}

// A checkpoint in the middle of an epoch: what decides the rest of that
// epoch's samples cannot change; refused in one line, nothing rewritten.
// Mid-epoch, what decides which samples the epoch holds (the seed, shuffle,
// drop_last) cannot change; a new batch size (or world size) goes on from the
// sample the epoch reached, unless trainer.limit_train_batches cuts the epoch
// at a number of batches (which would then mean other samples).
TEST(Resume, AMidEpochResumeRefusesANewSeedAndGoesOnFromItsSampleWithANewBatch) {
  TempDir dir;
  const std::string base = "train '" + kDemo + "' trainer.image_every_n_steps=0 checkpoint.every_n_steps=5";
  ASSERT_EQ(gantry::test::run_gantry(base + " trainer.max_steps=5", dir.path()).exit_code, 0);
  const auto run = dir.path() / "runs/gan_fashion_mnist/latest";
  const std::string config_before = gantry::test::read_text(run / "config.yaml");
  const auto r =
      gantry::test::run_gantry(base + " trainer.max_steps=10 trainer.resume=auto trainer.seed=7", dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("command line 'trainer.seed=7': resume: trainer.seed 42 -> 7: checkpoint"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("is mid-epoch (batch 5 of 938 of epoch 0), and trainer.seed decides which samples the "
                       "rest of that epoch holds"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(gantry::test::read_text(run / "config.yaml"), config_before);
  // A cut epoch cannot be regrouped.
  const auto cut = gantry::test::run_gantry(
      base + " trainer.max_steps=10 trainer.resume=auto data.batch_size=32 trainer.limit_train_batches=100",
      dir.path());
  EXPECT_EQ(cut.exit_code, 1) << cut.out << cut.err;
  EXPECT_NE(cut.err.find("resume: data.batch_size 64 -> 32: checkpoint"), std::string::npos) << cut.err;
  EXPECT_NE(cut.err.find("and data.batch_size regroups an epoch that trainer.limit_train_batches or overfit_batches "
                         "cuts at a number of batches"),
            std::string::npos)
      << cut.err;
  // A new batch size goes on from sample 5 x 64: the rest of epoch 0 is 59,680 samples, 1,865 batches of 32.
  const auto b =
      gantry::test::run_gantry(base + " trainer.max_steps=10 trainer.resume=auto data.batch_size=32", dir.path());
  EXPECT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("resize: epoch 0 goes on from sample 320 of 60000 (5 batches of 64 x 1 ranks were trained); "
                       "1865 batches of 32 x 1 ranks are left in it"),
            std::string::npos)
      << b.out;
  EXPECT_NE(b.out.find("done at step 10 (epoch 0)"), std::string::npos) << b.out;
  // The same batch size resumes as before.
  EXPECT_EQ(gantry::test::run_gantry(base + " trainer.max_steps=15 trainer.resume=auto data.batch_size=32", dir.path())
                .exit_code,
            0);
}

TEST(Resume, SigkillDuringACheckpointWriteLeavesTheOldOneValid) {
  TempDir dir;
  const auto cfg = ExperimentConfig::load(kDemo, {"system.plugin=" + gantry::test::gan_plugin_path()});
  Experiment e = Experiment::build(cfg);
  const auto modules = e.system->modules();
  const auto optimizers = e.system->configure_optimizers();
  const std::string path = dir / "c.ckpt";
  save_checkpoint(path, modules, optimizers, {1, 0, 1}, {"gan", "0.1.0", "", 0});
  std::mt19937 rng(7);
  for (int round = 0; round < 6; ++round) {
    const pid_t child = ::fork();
    if (child == 0) {  // rewrite the checkpoint over and over until killed
      for (int64_t s = 2;; ++s) save_checkpoint(path, modules, optimizers, {s, 0, s}, {"gan", "0.1.0", "", 0});
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng() % 200));
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    EXPECT_NO_THROW(read_checkpoint_meta(path)) << "round " << round;
  }
  // The killed writers' temp files are the only debris; the checkpoint is whole.
  EXPECT_GE(read_checkpoint_meta(path).global_step, 1);
}

// Every form of trainer.resume continues the run it names, and `latest` keeps
// naming that run: a resume through latest/ took `latest` for the run
// directory, pointed it at itself ("Too many levels of symbolic links") and
// broke every resume=auto after it.
TEST(Resume, EveryPathFormContinuesItsRunAndLatestKeepsNamingIt) {
  namespace fs = std::filesystem;
  TempDir dir;
  fs::create_directory(dir.path() / "real");
  fs::create_directory_symlink("real", dir.path() / "link");  // an out_dir through a link
  const std::string base = "train '" + gantry::test::kTiny +
                           "' system.synthetic=true system.pixels=2 data.path=/nonexistent "
                           "checkpoint.every_n_steps=10 checkpoint.keep_last=0 ";
  ASSERT_EQ(gantry::test::run_gantry(base + "trainer.out_dir=link trainer.max_steps=10", dir.path()).exit_code, 0);
  const fs::path exp = dir.path() / "real/tiny";
  const std::string name = fs::read_symlink(exp / "latest").string();
  const fs::path run = exp / name;
  // (out_dir, trainer.resume): each resumes the newest step and trains 10 more.
  const std::vector<std::pair<std::string, std::string>> forms = {
      {"link", "link/tiny/" + name + "/checkpoints/step_0000010.ckpt"},                    // relative
      {"real", (run / "checkpoints/step_0000020.ckpt").string()},                          // absolute
      {"link", "link/tiny/latest/checkpoints/step_0000030.ckpt"},                          // through latest
      {"real", (dir.path() / "link/tiny/latest/checkpoints/step_0000040.ckpt").string()},  // through both links
      {"link", "link/tiny/latest"},                                                        // a run directory
      {"real", "real/tiny/" + name},                                                       // ... by its name
      {"link", "link/tiny"},                                                               // an experiment
      {"real", "auto"}};
  int64_t steps = 10;
  for (const auto& [out_dir, resume] : forms) {
    steps += 10;
    const auto r = gantry::test::run_gantry(base + "trainer.out_dir=" + out_dir + " trainer.resume=" + resume +
                                                " trainer.max_steps=" + std::to_string(steps),
                                            dir.path());
    ASSERT_EQ(r.exit_code, 0) << resume << "\n" << r.out << r.err;
    EXPECT_NE(r.out.find("done at step " + std::to_string(steps)), std::string::npos) << resume << "\n" << r.out;
    EXPECT_NE(r.out.find("step_" + std::string(7 - std::to_string(steps - 10).size(), '0') +
                         std::to_string(steps - 10) + ".ckpt"),
              std::string::npos)
        << resume << ": not resumed from the newest\n"
        << r.out;
    EXPECT_EQ(fs::read_symlink(exp / "latest").string(), name) << resume;
    EXPECT_TRUE(fs::exists(run / ("checkpoints/step_" + std::string(7 - std::to_string(steps).size(), '0') +
                                  std::to_string(steps) + ".ckpt")))
        << resume << ": the run did not continue in " << run;
    EXPECT_EQ(gantry::test::run_dirs_in(exp), 1) << resume << ": a new run directory was made";
  }
}

// A checkpoint between epochs by default (checkpoint.every_n_epochs: 1, as
// Lightning): a 3-epoch run of 4 batches an epoch writes steps 4, 8 and 12;
// a resume from step 4 is the uninterrupted run (the same weights at step 12,
// the same rows) and says which metrics.csv rows it drops; 0 writes the end's only.
TEST(Resume, AnEpochsEndIsACheckpointAndAResumeFromItIsTheUninterruptedRun) {
  TempDir dir;
  const std::string args = "train " + gantry::test::source_path("tests/sdk_plugin/tiny.yaml") +
                           " system.plugin=" + gantry::test::plugin_path("tiny") +
                           " system.synthetic=true system.pixels=2 data.batch_size=1024 trainer.max_steps=-1"
                           " trainer.max_epochs=3 trainer.log_every_n_steps=1 trainer.threads=1 checkpoint.keep_last=0";
  const auto a = gantry::test::run_gantry(args, dir.path());
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  const auto ckpts = dir.path() / "runs/tiny/latest/checkpoints";
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(ckpts)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step_0000004.ckpt", "step_0000008.ckpt", "step_0000012.ckpt"}));
  const auto straight_rows = metric_rows((dir.path() / "runs/tiny/latest/metrics.csv").string());
  std::filesystem::copy_file(ckpts / "step_0000012.ckpt", dir.path() / "straight.ckpt");

  const auto b =
      gantry::test::run_gantry(args + " trainer.resume=" + (ckpts / "step_0000004.ckpt").string(), dir.path());
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  EXPECT_NE(b.out.find("resume: metrics.csv: 8 rows after step 4 (to step 12) dropped"), std::string::npos) << b.out;
  gantry::test::expect_same_weights((dir.path() / "straight.ckpt").string(), (ckpts / "step_0000012.ckpt").string());
  EXPECT_EQ(metric_rows((dir.path() / "runs/tiny/latest/metrics.csv").string()), straight_rows);

  TempDir none;
  ASSERT_EQ(gantry::test::run_gantry(args + " checkpoint.every_n_epochs=0", none.path()).exit_code, 0);
  names.clear();
  for (const auto& e : std::filesystem::directory_iterator(none.path() / "runs/tiny/latest/checkpoints"))
    names.push_back(e.path().filename());
  EXPECT_EQ(names, (std::vector<std::string>{"step_0000012.ckpt"}));
}

// checkpoint.every_n_minutes (Lightning's train_time_interval): a run of a
// few seconds with 0.005 minutes (0.3 s) and no step or epoch checkpoints
// writes ones between, at steps no count decides; a resume from one of them
// is the uninterrupted run. With two ranks every rank writes at the same
// batch (the checkpoint gathers every rank's RNG state, a collective: ranks
// that disagreed hang: tried with each rank deciding by its own clock, the
// collective timed out at trainer.dist_timeout) and their replicas stay bit-identical.
TEST(Resume, EveryNMinutesCheckpointsOnTheClockAtTheBatchEveryRankAgreesOn) {
  namespace fs = std::filesystem;
  const std::string args = "'" + gantry::test::kTiny +
                           "' system.synthetic=true system.pixels=2 data.batch_size=64 trainer.threads=1"
                           " checkpoint.every_n_minutes=0.005 checkpoint.every_n_epochs=0 checkpoint.keep_last=0";
  auto steps_in = [](const fs::path& ckpts) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(ckpts)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  };
  TempDir one;
  const auto a = gantry::test::run_gantry("train " + args + " trainer.max_steps=6000", one.path(), "timeout 300");
  ASSERT_EQ(a.exit_code, 0) << a.out << a.err;
  const fs::path ckpts = one.path() / "runs/tiny/latest/checkpoints";
  const auto names = steps_in(ckpts);
  ASSERT_GE(names.size(), 3u) << "a run of " << a.out.size() << " output bytes wrote only the end's checkpoint";
  EXPECT_EQ(names.back(), "step_0006000.ckpt");
  fs::copy_file(ckpts / names.back(), one.path() / "straight.ckpt");
  const std::string middle = names[names.size() / 2];
  const auto b = gantry::test::run_gantry(
      "train " + args + " trainer.max_steps=6000" + " trainer.resume=" + (ckpts / middle).string(), one.path(),
      "timeout 300");
  ASSERT_EQ(b.exit_code, 0) << b.out << b.err;
  gantry::test::expect_same_weights((one.path() / "straight.ckpt").string(), (ckpts / names.back()).string());

  TempDir two;
  const auto c = gantry::test::run_gantry("launch -n 2 " + args + " trainer.max_steps=3000 trainer.dist_timeout=30",
                                          two.path(), "timeout 300");
  ASSERT_EQ(c.exit_code, 0) << c.out << c.err;
  EXPECT_GE(steps_in(two.path() / "runs/tiny/latest/checkpoints").size(), 3u) << c.out;
  EXPECT_NE(c.out.find("replicas bit-identical across 2 ranks"), std::string::npos) << c.out;
}
