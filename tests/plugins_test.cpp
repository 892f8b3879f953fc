// The example plugins beyond the basic GAN, trained as a user would:
// WGAN-GP on its own 8-Gaussian ring (SDK 1.1 Dataset, ctx.next_batch for
// n_critic) and on Fashion-MNIST.
#include <filesystem>

#include "support.hpp"

using gantry::test::run_gantry;
using gantry::test::TempDir;

namespace {

const std::string kRing = gantry::test::source_path("configs/wgan_gp_ring.yaml");
// Narrow layers keep the test quick; the algorithm is the same.
const std::string kSmall = " system.generator_hidden=[64,64] system.critic_hidden=[64,64] data.batch_size=64"
                           " trainer.log_every_n_steps=5 trainer.image_every_n_steps=10 checkpoint.every_n_steps=10"
                           " trainer.progress=none";

std::filesystem::path ckpt(const TempDir& d, const std::string& experiment, int step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoints/step_%07d.ckpt", step);
  return d.path() / "runs" / experiment / "latest" / name;
}

}  // namespace

TEST(Plugins, WganGpOnItsOwnRingTrainsOnTwoRanksAndResumesExactly) {
  TempDir two, straight, resumed;
  auto r = run_gantry("launch -n 2 '" + kRing + "'" + kSmall + " trainer.max_steps=20", two.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] replicas bit-identical across 2 ranks"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("data: plugin wgan_gp's own, 100000 samples"), std::string::npos) << r.out;
  const auto run = two.path() / "runs/wgan_gp_ring/latest";
  EXPECT_TRUE(std::filesystem::exists(run / "images/scatter_0000020.png"));
  const auto csv = gantry::test::read_text(run / "metrics.csv");
  for (const char* column : {"d_loss", "wasserstein", "gp", "g_loss", "modes_covered", "high_quality"})
    EXPECT_NE(gantry::test::lines_of(csv)[0].find(column), std::string::npos) << column << " not in " << csv;
  // 1 rank: 20 steps straight vs 10 + a resume to 20 (mid-epoch, 5 batches a step).
  r = run_gantry("train '" + kRing + "'" + kSmall + " trainer.max_steps=20", straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_gantry("train '" + kRing + "'" + kSmall + " trainer.max_steps=20 trainer.resume=" +
                     ckpt(straight, "wgan_gp_ring", 10).string(),
                 resumed.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  gantry::test::expect_same_weights(ckpt(straight, "wgan_gp_ring", 20).string(),
                                    ckpt(resumed, "wgan_gp_ring", 20).string());
  // gantry sample draws the ring's samples as the plugin renders them: one scatter plot.
  r = run_gantry("sample -c '" + ckpt(straight, "wgan_gp_ring", 20).string() + "' -n 500 -o ring.png", straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto png = gantry::test::read_text(straight.path() / "ring.png");
  ASSERT_GT(png.size(), 24u);
  EXPECT_EQ(png.substr(1, 3), "PNG");
  const auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(png[at])) << 24) | (uint32_t(uint8_t(png[at + 1])) << 16) |
           (uint32_t(uint8_t(png[at + 2])) << 8) | uint32_t(uint8_t(png[at + 3]));
  };
  EXPECT_EQ(be32(16), 256u + 4u);  // one 256 x 256 tile with the grid's 2-pixel border
  EXPECT_EQ(be32(20), 256u + 4u);
}

TEST(Plugins, WganGpTrainsOnFashionMnist) {
  TempDir dir;
  const auto r = run_gantry("train '" + gantry::test::source_path("configs/wgan_gp_fashion_mnist.yaml") + "'" +
                                kSmall + " trainer.max_steps=10",
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 10 (epoch 0): trainer.max_steps=10 reached"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "runs/wgan_gp_fashion_mnist/latest/images/generated_0000010.png"));
}
