// Checkpoints: weights, optimizer state, step and RNG restored exactly; a file
// of another model or plugin, or a corrupt one, is a clear error; the names in
// a run's checkpoints/ and which file a path, run or experiment means.
#include <torch/torch.h>

#include "checkpoint/file.hpp"
#include "checkpoint/names.hpp"
#include "checkpoint/resolve.hpp"
#include "gantry/errors.hpp"
#include "support.hpp"
#include "optim/fused_adam.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;
using gantry::test::write_text;

namespace {

Experiment gan_experiment(const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> o = {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.progress=none",
                                "trainer.image_every_n_steps=0"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return Experiment::build(ExperimentConfig::load(gantry::test::source_path("configs/gan_fashion_mnist.yaml"), o));
}

}  // namespace

TEST(Checkpoint, RoundTripRestoresWeightsOptimizerStateStepAndRng) {
  TempDir dir;
  // Five real training steps, so that Adam has state and BatchNorm has stats.
  Experiment a = gan_experiment({"trainer.max_steps=5", "data.batch_size=16"});
  auto trained = a.system;
  const auto data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  a.use_images(data);
  const FitResult r = Trainer(a, dir.path().string()).fit();
  ASSERT_EQ(r.state.global_step, 5);
  const std::string path = r.last_checkpoint;
  ASSERT_TRUE(std::filesystem::exists(path));

  torch::manual_seed(999);  // a different init
  Experiment b = gan_experiment();
  auto mods = b.system->modules();
  auto opts = b.system->configure_optimizers();
  const TrainState got = load_checkpoint(path, "gan", mods, opts, true);
  EXPECT_EQ(got.global_step, 5);
  EXPECT_EQ(got.epoch, 0);
  EXPECT_EQ(got.batch_in_epoch, 5);
  const auto rng_next = torch::rand({4});
  auto trained_mods = trained->modules();
  for (size_t m = 0; m < mods.size(); ++m) {
    auto pb = mods[m].module->named_parameters();
    for (const auto& p : trained_mods[m].module->named_parameters())
      EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
    auto bb = mods[m].module->named_buffers();
    for (const auto& p : trained_mods[m].module->named_buffers())
      EXPECT_TRUE(torch::equal(p.value(), bb[p.key()])) << p.key();
  }
  // Adam's state came back: every parameter has taken 5 steps, with moments.
  for (const auto& o : opts) {
    auto& adam = dynamic_cast<torch::optim::Adam&>(*o.optimizer);
    for (const auto& p : adam.param_groups()[0].params()) {
      const auto key = gantry::optimizer_state_key(p);
      ASSERT_TRUE(adam.state().count(key)) << o.name;
      const auto& st = static_cast<const torch::optim::AdamParamState&>(*adam.state().at(key));
      EXPECT_EQ(st.step(), 5) << o.name;
      EXPECT_GT(st.exp_avg_sq().abs().sum().item<double>(), 0) << o.name;
    }
  }
  // The RNG continues where the checkpoint left it.
  load_checkpoint(path, "gan", mods, opts, true);
  EXPECT_TRUE(torch::equal(torch::rand({4}), rng_next));
  EXPECT_EQ(read_checkpoint_meta(path).plugin, "gan");
}

TEST(Checkpoint, ModelOfAnotherShapeIsAClearErrorAndChangesNothing) {
  TempDir dir;
  Experiment a = gan_experiment();
  save_checkpoint(dir / "a.ckpt", a.system->modules(), a.system->configure_optimizers(), {}, {"gan", "0.1.0", ""});
  Experiment b = gan_experiment({"system.latent_dim=50"});
  auto mods = b.system->modules();
  const auto before = mods[0].module->parameters()[0].clone();
  try {
    load_checkpoint(dir / "a.ckpt", "gan", mods, {}, false);
    FAIL() << "expected CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("'generator.model.0.weight' has shape [128, 100], the "
                                         "model has [128, 50]"),
              std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(torch::equal(before, mods[0].module->parameters()[0]));
}

TEST(Checkpoint, OtherPluginIsAClearError) {
  TempDir dir;
  Experiment a = gan_experiment();
  save_checkpoint(dir / "a.ckpt", a.system->modules(), {}, {}, {"gan", "0.1.0", ""});
  EXPECT_THROW(
      {
        try {
          load_checkpoint(dir / "a.ckpt", "tiny", a.system->modules(), {}, false);
        } catch (const CheckpointError& e) {
          EXPECT_NE(std::string(e.what()).find("written by plugin 'gan', this run uses plugin 'tiny'"),
                    std::string::npos);
          throw;
        }
      },
      CheckpointError);
}

TEST(Checkpoint, TruncatedFileIsDetected) {
  TempDir dir;
  Experiment a = gan_experiment();
  save_checkpoint(dir / "a.ckpt", a.system->modules(), {}, {}, {"gan", "0.1.0", ""});
  const std::string bytes = gantry::test::read_text(dir / "a.ckpt");
  gantry::test::write_text(dir / "cut.ckpt", bytes.substr(0, bytes.size() * 2 / 3));
  EXPECT_THROW(read_checkpoint_meta(dir / "cut.ckpt"), CheckpointError);
  gantry::test::write_text(dir / "junk.ckpt", "not a checkpoint");
  EXPECT_THROW(read_checkpoint_meta(dir / "junk.ckpt"), CheckpointError);
}

// PBT's exploit: the copy restores the source's weights, optimizer and step
// exactly, verifies, and draws another random stream (the same for the same
// seed, another for another seed).
TEST(Checkpoint, AForkIsTheSourceWithNewRandomStreams) {
  TempDir dir;
  Experiment a = gan_experiment({"trainer.max_steps=3", "data.batch_size=16"});
  a.use_images(load_idx_images(gantry::test::fashion_mnist_dir(), "train"));
  const FitResult r = Trainer(a, dir.path().string()).fit();
  fork_checkpoint(r.last_checkpoint, dir / "fork.ckpt", 7);
  fork_checkpoint(r.last_checkpoint, dir / "again.ckpt", 7);
  fork_checkpoint(r.last_checkpoint, dir / "other.ckpt", 8);
  EXPECT_EQ(gantry::test::read_text(dir / "fork.ckpt"), gantry::test::read_text(dir / "again.ckpt"));
  auto draw_after = [&](const std::string& path, std::vector<NamedModule>& mods, std::vector<NamedOptimizer>& opts) {
    const TrainState s = load_checkpoint(path, "gan", mods, opts, true);
    EXPECT_EQ(s.global_step, 3);
    return torch::rand({8});
  };
  Experiment b = gan_experiment(), c = gan_experiment(), d = gan_experiment();
  auto mb = b.system->modules(), mc = c.system->modules(), md = d.system->modules();
  auto ob = b.system->configure_optimizers(), oc = c.system->configure_optimizers(),
       od = d.system->configure_optimizers();
  const torch::Tensor source = draw_after(r.last_checkpoint, mb, ob);
  const torch::Tensor forked = draw_after(dir / "fork.ckpt", mc, oc);
  const torch::Tensor other = draw_after(dir / "other.ckpt", md, od);
  EXPECT_FALSE(torch::equal(source, forked));
  EXPECT_FALSE(torch::equal(forked, other));
  for (size_t m = 0; m < mb.size(); ++m) {
    auto pc = mc[m].module->named_parameters();
    for (const auto& p : mb[m].module->named_parameters()) EXPECT_TRUE(torch::equal(p.value(), pc[p.key()])) << p.key();
  }
  // Adam's moments came along: one more step of each from the same batch is the same.
  for (size_t o = 0; o < ob.size(); ++o) {
    auto& sb = ob[o].optimizer->state();
    auto& sc = oc[o].optimizer->state();
    ASSERT_EQ(sb.size(), sc.size());
    EXPECT_FALSE(sb.empty());
  }
  EXPECT_THROW(fork_checkpoint(dir / "missing.ckpt", dir / "x.ckpt", 1), CheckpointError);
  EXPECT_FALSE(std::filesystem::exists(dir / "x.ckpt"));
}

namespace {

// Flips a bit in the middle of the largest entry of a checkpoint's zip
// archive (a tensor's data), found through the central directory (the local
// headers of a streamed zip hold no sizes).
std::string with_a_tensor_byte_flipped(std::string bytes) {
  auto u16 = [&](size_t at) { return size_t(uint8_t(bytes[at])) | size_t(uint8_t(bytes[at + 1])) << 8; };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  const size_t end = bytes.rfind(std::string("PK\x05\x06", 4));
  EXPECT_NE(end, std::string::npos);
  size_t at = u32(end + 16), best_at = 0, best_size = 0;
  for (size_t k = 0; k < u16(end + 10); ++k) {
    const size_t size = u32(at + 20), local = u32(at + 42);
    const size_t data = local + 30 + u16(local + 26) + u16(local + 28);
    if (size > best_size) best_at = data, best_size = size;
    at += 46 + u16(at + 28) + u16(at + 30) + u16(at + 32);
  }
  EXPECT_GT(best_size, 1000u);
  bytes[best_at + best_size / 2] ^= 0x40;
  return bytes;
}

}  // namespace

// zlib's crc32 of a null buffer is 0: an empty tensor (here in the trainer
// state, after the weights in key order) restarted the checksum, so a
// flipped bit in the weights went unnoticed.
TEST(Checkpoint, AFlippedBitIsFoundWhateverFollowsIt) {
  TempDir dir;
  Experiment a = gan_experiment();
  TrainState s;
  s.extra["zz.empty"] = torch::empty({0});
  save_checkpoint(dir / "a.ckpt", a.system->modules(), {}, s, {"gan", "0.1.0", ""});
  EXPECT_NO_THROW(read_checkpoint_meta(dir / "a.ckpt"));
  gantry::test::write_text(dir / "b.ckpt", with_a_tensor_byte_flipped(gantry::test::read_text(dir / "a.ckpt")));
  try {
    read_checkpoint_meta(dir / "b.ckpt");
    ADD_FAILURE() << "a flipped bit was not found";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("is corrupt: checksum"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, ResumedRunEndsBitIdenticalToAnUninterruptedOne) {
  TempDir straight, first, second;
  const auto data = load_idx_images(gantry::test::fashion_mnist_dir(), "train");
  const std::vector<std::string> common = {"data.batch_size=16", "trainer.log_every_n_steps=1"};
  auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.end(), common.begin(), common.end());
    Experiment e = gan_experiment(extra);
    e.use_images(data);
    return e;
  };
  const FitResult a = Trainer(with({"trainer.max_steps=10"}), straight.path().string()).fit();
  const FitResult b = Trainer(with({"trainer.max_steps=5"}), first.path().string()).fit();
  const FitResult c =
      Trainer(with({"trainer.max_steps=10", "trainer.resume=" + b.last_checkpoint}), second.path().string()).fit();
  ASSERT_EQ(c.state.global_step, 10);
  EXPECT_EQ(c.steps_run, 5);  // its own batches: steps/s after a resume once counted the first run's too
  EXPECT_EQ(a.steps_run, 10);
  const auto sa = gantry::test::state_dict_of(a.last_checkpoint);
  const auto sc = gantry::test::state_dict_of(c.last_checkpoint);
  ASSERT_EQ(sa.size(), sc.size());
  for (const auto& e : sa)
    EXPECT_TRUE(torch::equal(e.value().toTensor(), sc.at(e.key()).toTensor())) << e.key().toStringRef();
  EXPECT_EQ(a.last_values, c.last_values);
}

// ---- The names in checkpoints/ and which file a path means -------------------

TEST(CheckpointNames, StepAndBestNamesParseBackAndNothingElseIs) {
  EXPECT_EQ(ckpt::step_file(1000), "step_0001000.ckpt");
  EXPECT_EQ(ckpt::best_file(7), "best_step_0000007.ckpt");
  EXPECT_EQ(ckpt::parse_file("step_0001000.ckpt").kind, ckpt::FileKind::kStep);
  EXPECT_EQ(ckpt::parse_file("step_0001000.ckpt").step, 1000);
  EXPECT_EQ(ckpt::parse_file("best_step_0000007.ckpt").kind, ckpt::FileKind::kBest);
  EXPECT_EQ(ckpt::parse_file("step_12345678.ckpt").step, 12345678);  // past 7 digits
  for (const char* other : {"best.ckpt", "step_.ckpt", "step_12.ckpt.tmp.1", "step_1x.ckpt", ".best.ckpt.tmp",
                            "xstep_1.ckpt", "step_-1.ckpt"})
    EXPECT_EQ(ckpt::parse_file(other).kind, ckpt::FileKind::kOther) << other;
}

TEST(CheckpointNames, PruningKeepsTheNewestStepsByStepAndEveryBestFile) {
  TempDir dir;
  for (int64_t step : {5, 30, 10000000, 200}) write_text(dir / ckpt::step_file(step), "x");
  write_text(dir / ckpt::best_file(5), "x");
  ckpt::prune_steps(dir.path().string(), 2);
  std::vector<std::string> left;
  for (const auto& f : ckpt::list_files(dir.path().string()))
    left.push_back(std::filesystem::path(f.path).filename().string());
  // Newest first by step (10000000 sorts before 200 by step, after it by name).
  EXPECT_EQ(left, (std::vector<std::string>{"step_10000000.ckpt", "step_0000200.ckpt", "best_step_0000005.ckpt"}));
}

namespace {

// A run of the tiny plugin on its synthetic ring: checkpoints at 10..40, the
// two best by val_loss kept (best.ckpt links the lowest). Returns the
// experiment directory; `run` the real run directory.
std::filesystem::path tiny_run(const TempDir& dir, std::filesystem::path& run) {
  const auto r = gantry::test::run_gantry(
      "train '" + gantry::test::kTiny +
          "' system.synthetic=true system.pixels=2 data.path=/nonexistent trainer.max_steps=40 "
          "checkpoint.every_n_steps=10 checkpoint.keep_last=0 trainer.val_every_n_steps=10 "
          "checkpoint.monitor=val_loss checkpoint.save_top_k=2",
      dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto exp = dir.path() / "runs/tiny";
  run = std::filesystem::canonical(exp / "latest");
  return exp;
}

std::string real(const std::filesystem::path& p) { return std::filesystem::canonical(p).string(); }

}  // namespace

TEST(CheckpointResolve, ARunOrExperimentMeansItsNewestForAResumeAndItsBestForInference) {
  TempDir dir;
  std::filesystem::path run;
  const auto exp = tiny_run(dir, run);
  const std::string newest = real(run / "checkpoints/step_0000040.ckpt");
  const std::string best = real(run / "checkpoints/best.ckpt");
  ASSERT_NE(best.find("best_step_"), std::string::npos) << best;
  for (const auto& given : {exp, exp / "latest", run}) {
    const ResolvedCheckpoint a = resolve_checkpoint(given.string(), CheckpointUse::kResume);
    ASSERT_TRUE(a.found()) << given;
    EXPECT_EQ(a.path, newest) << given;
    EXPECT_EQ(a.file->meta().global_step, 40);
    EXPECT_NE(a.why.find("the newest valid checkpoint in " + given.string() + " (step 40)"), std::string::npos)
        << a.why;
    const ResolvedCheckpoint b = resolve_checkpoint(given.string(), CheckpointUse::kInference);
    EXPECT_EQ(b.path, best) << given;
    // "…/checkpoints/best.ckpt -> best_step_0000030.ckpt: val_loss 0.6931 at step 30 (checkpoint.monitor val_loss min)"
    const std::string step = std::to_string(b.file->meta().global_step);
    EXPECT_NE(b.why.find("checkpoints/best.ckpt -> " + std::filesystem::path(best).filename().string() + ": val_loss "),
              std::string::npos)
        << b.why;
    EXPECT_NE(b.why.find(" at step " + step + " (checkpoint.monitor val_loss min)"), std::string::npos) << b.why;
    // The value is the one metrics.csv has at that step.
    const auto val = gantry::test::column_by_step((run / "metrics.csv").string(), "val_loss");
    ASSERT_TRUE(val.count(b.file->meta().global_step));
    EXPECT_NEAR(std::stod(b.why.substr(b.why.find("val_loss ") + 9)), std::stod(val.at(b.file->meta().global_step)),
                1e-4 * std::abs(std::stod(val.at(b.file->meta().global_step))) + 1e-6)
        << b.why;
    // What --watch compares first, without reading.
    EXPECT_EQ(checkpoint_candidates(given.string(), CheckpointUse::kInference).front(), best);
    EXPECT_EQ(checkpoint_candidates(given.string(), CheckpointUse::kResume).front(), newest);
  }
  // Short names of a directory's files, through `latest`: links resolved.
  EXPECT_EQ(resolve_checkpoint((exp / "latest/best").string(), CheckpointUse::kResume).path, best);
  EXPECT_EQ(resolve_checkpoint((exp / "latest/last").string(), CheckpointUse::kInference).path, newest);
  EXPECT_EQ(resolve_checkpoint((exp / "latest/step_0000020").string(), CheckpointUse::kInference).path,
            real(run / "checkpoints/step_0000020.ckpt"));
  const ResolvedCheckpoint through =
      resolve_checkpoint((exp / "latest/checkpoints/step_0000010.ckpt").string(), CheckpointUse::kInference);
  EXPECT_EQ(through.path, real(run / "checkpoints/step_0000010.ckpt"));
  EXPECT_EQ(through.path.find("latest"), std::string::npos) << through.path;
}

TEST(CheckpointResolve, UnreadableFilesAreSkippedWithALineAndNothingIsAClearError) {
  TempDir dir;
  std::filesystem::path run;
  const auto exp = tiny_run(dir, run);
  // Both files of step 40 cut (best_step_0000040.ckpt too, when it was a best).
  size_t cut = 0;
  for (const char* name : {"step_0000040.ckpt", "best_step_0000040.ckpt"})
    if (std::filesystem::exists(run / "checkpoints" / name)) {
      write_text((run / "checkpoints" / name).string(), "cut");
      ++cut;
    }
  std::vector<std::string> skipped;
  const ResolvedCheckpoint r = resolve_checkpoint(exp.string(), CheckpointUse::kResume, &skipped);
  ASSERT_TRUE(r.found());
  EXPECT_EQ(r.file->meta().global_step, 30) << r.path;
  ASSERT_EQ(skipped.size(), cut);
  EXPECT_NE(skipped[0].find("skipping checkpoint " + real(run / "checkpoints")), std::string::npos) << skipped[0];
  EXPECT_NE(skipped[0].find("step_0000040.ckpt"), std::string::npos) << skipped[0];
  // A file named outright is that file, or its error.
  EXPECT_THROW(resolve_checkpoint((run / "checkpoints/step_0000040.ckpt").string(), CheckpointUse::kResume),
               CheckpointError);
  try {
    resolve_checkpoint((dir.path() / "nowhere").string(), CheckpointUse::kInference);
    ADD_FAILURE() << "no error for a path that does not exist";
  } catch (const CheckpointError& e) {
    EXPECT_EQ(std::string(e.what()),
              (dir.path() / "nowhere").string() + ": no such checkpoint, run or experiment directory");
  }
  // A directory with nothing valid: not found, and require_ says so naming it.
  std::filesystem::create_directories(dir.path() / "empty/checkpoints");
  EXPECT_FALSE(resolve_checkpoint(dir / "empty", CheckpointUse::kResume).found());
  try {
    require_checkpoint(dir / "empty", CheckpointUse::kInference);
    ADD_FAILURE() << "no error for a run directory without checkpoints";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(dir / "empty" + ": no valid checkpoint in it"), std::string::npos) << e.what();
  }
  // best of a run that kept none.
  std::filesystem::remove(run / "checkpoints/best.ckpt");
  EXPECT_THROW(resolve_checkpoint((run / "best").string(), CheckpointUse::kInference), CheckpointError);
  const ResolvedCheckpoint no_best = resolve_checkpoint(run.string(), CheckpointUse::kInference);
  EXPECT_NE(no_best.why.find("the run kept no best.ckpt"), std::string::npos) << no_best.why;
}

// sample, serve and a resume take a run directory through one resolution and
// say which file: the CLI lines of the same function.
TEST(CheckpointResolve, SampleAndValidateOfAResumeSayWhichFileARunDirectoryMeans) {
  TempDir dir;
  std::filesystem::path run;
  const auto exp = tiny_run(dir, run);
  auto r = gantry::test::run_gantry("sample -c runs/tiny/latest -n 4 --tensors t.pt", dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("checkpoint: runs/tiny/latest/checkpoints/best.ckpt -> best_step_"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("from " + real(run / "checkpoints/best.ckpt")), std::string::npos) << r.out;
  r = gantry::test::run_gantry("validate '" + gantry::test::kTiny +
                                   "' system.synthetic=true system.pixels=2 data.path=/nonexistent "
                                   "trainer.resume=runs/tiny",
                               dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("resume: " + real(run / "checkpoints/step_0000040.ckpt") +
                       ": the newest valid checkpoint in runs/tiny (step 40)"),
            std::string::npos)
      << r.out;
}
