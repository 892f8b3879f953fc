// The example plugins beyond the basic GAN, trained as a user would:
// WGAN-GP on its own 8-Gaussian ring (SDK 1.1 Dataset, ctx.next_batch for
// n_critic) and on Fashion-MNIST; DCGAN at 28x28x1 on Fashion-MNIST and at
// 32x32x3 on files in CIFAR-10's format; the basic GAN on a folder of images.
#include <filesystem>

#include "io/png.hpp"

#include "support.hpp"

using gantry::test::run_gantry;
using gantry::test::TempDir;

namespace {

const std::string kRing = gantry::test::source_path("configs/wgan_gp_ring.yaml");
// Narrow layers keep the test quick; the algorithm is the same.
const std::string kSmall =
    " system.generator_hidden=[64,64] system.critic_hidden=[64,64] data.batch_size=64"
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
  r = run_gantry("train '" + kRing + "'" + kSmall +
                     " trainer.max_steps=20 trainer.resume=" + ckpt(straight, "wgan_gp_ring", 10).string(),
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
  const auto r = run_gantry("train '" + gantry::test::source_path("configs/wgan_gp_fashion_mnist.yaml") + "'" + kSmall +
                                " trainer.max_steps=10",
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("done at step 10 (epoch 0): trainer.max_steps=10 reached"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir.path() / "runs/wgan_gp_fashion_mnist/latest/images/generated_0000010.png"));
}

namespace {

// DCGAN narrowed (8 channels wide instead of 64): the same layers and step.
const std::string kDcganSmall =
    " system.ngf=8 system.ndf=8 data.batch_size=16 trainer.log_every_n_steps=2"
    " trainer.image_every_n_steps=4 checkpoint.every_n_steps=4 trainer.progress=none";

}  // namespace

TEST(Plugins, DcganTrainsOnTwoRanksAndResumesExactly) {
  const std::string cfg = gantry::test::source_path("configs/dcgan_fashion_mnist.yaml");
  TempDir two, straight, resumed;
  auto r = run_gantry("launch -n 2 '" + cfg + "'" + kDcganSmall + " trainer.max_steps=6", two.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[rank 0] replicas bit-identical across 2 ranks"), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(two.path() / "runs/dcgan_fashion_mnist/latest/images/generated_0000004.png"));
  // 8 steps straight vs 4 + a resume to 8: BatchNorm's running statistics and both Adams come back.
  r = run_gantry("train '" + cfg + "'" + kDcganSmall + " trainer.max_steps=8", straight.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_gantry("train '" + cfg + "'" + kDcganSmall +
                     " trainer.max_steps=8 trainer.resume=" + ckpt(straight, "dcgan_fashion_mnist", 4).string(),
                 resumed.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  gantry::test::expect_same_weights(ckpt(straight, "dcgan_fashion_mnist", 8).string(),
                                    ckpt(resumed, "dcgan_fashion_mnist", 8).string());
  const auto names = gantry::test::state_dict_of(ckpt(straight, "dcgan_fashion_mnist", 8).string());
  EXPECT_TRUE(names.contains("discriminator.model.3.running_mean"));
}

TEST(Plugins, DcganTrainsOnCifar10FormatFilesInColour) {
  TempDir dir;
  const auto bin = dir.path() / "cifar-10-batches-bin";
  std::filesystem::create_directories(bin);
  // 2 files of 40 records: label k % 10, a colour gradient that differs per image.
  for (int f = 1; f <= 2; ++f) {
    std::string bytes;
    for (int k = 0; k < 40; ++k) {
      bytes.push_back(static_cast<char>(k % 10));
      for (int j = 0; j < 3072; ++j) bytes.push_back(static_cast<char>((j / 1024) * 80 + (j % 32) * 4 + k));
    }
    gantry::test::write_text((bin / ("data_batch_" + std::to_string(f) + ".bin")).string(), bytes);
  }
  const auto r = run_gantry("train '" + gantry::test::source_path("configs/dcgan_cifar10.yaml") + "'" + kDcganSmall +
                                " trainer.max_steps=4 data.path=" + dir.path().string(),
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: 80 images 3x32x32 from " + (bin / "data_batch_*.bin").string()), std::string::npos)
      << r.out;
  const auto png = gantry::test::read_text(dir.path() / "runs/dcgan_cifar10/latest/images/generated_0000004.png");
  ASSERT_GT(png.size(), 26u);
  EXPECT_EQ(png[25], 2) << "the grid is not an RGB PNG";  // IHDR colour type 2: truecolour
  // The 28x28 gray model on the same files: one line naming both shapes.
  const auto bad = run_gantry(
      "train '" + gantry::test::source_path("configs/dcgan_cifar10.yaml") + "'" + kDcganSmall +
          " trainer.max_steps=4 system.channels=1 system.height=28 system.width=28 data.path=" + dir.path().string(),
      dir.path());
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.err.find("samples are [3, 32, 32], plugin dcgan expects [1, 28, 28]"), std::string::npos) << bad.err;
}

TEST(Plugins, TheBasicGanTrainsOnAFolderOfImagesResizedToItsShape) {
  TempDir dir;
  // 3 classes x 8 RGB 32x32 PNGs; the GAN wants 1x28x28.
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 8; ++i) {
      gantry::Image8 img;
      img.width = img.height = 32;
      img.channels = 3;
      for (int p = 0; p < 32 * 32; ++p)
        for (int ch = 0; ch < 3; ++ch)
          img.pixels.push_back(static_cast<uint8_t>((p * (c + 1) + i * 9 + ch * 50) % 256));
      const auto folder = dir.path() / "images" / ("class" + std::to_string(c));
      std::filesystem::create_directories(folder);
      gantry::test::write_text((folder / ("img" + std::to_string(i) + ".png")).string(), gantry::encode_png(img));
    }
  const auto r = run_gantry("train '" + gantry::test::kDemo +
                                "' data.format=image_folder data.path=" + (dir.path() / "images").string() +
                                " data.batch_size=8 trainer.max_steps=3 trainer.progress=none",
                            dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("data: 24 images 1x28x28 from " + (dir.path() / "images").string()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("done at step 3"), std::string::npos) << r.out;
}
