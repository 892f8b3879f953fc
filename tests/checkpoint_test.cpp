// Checkpoints: weights, optimizer state, step and RNG restored exactly; a file
// of another model or plugin, or a corrupt one, is a clear error.
#include <torch/torch.h>

#include "train/checkpoint.hpp"
#include "gantry/errors.hpp"
#include "support.hpp"
#include "optim/fused_adam.hpp"
#include "train/trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;

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
