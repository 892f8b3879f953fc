// The sample-quality score (quality/quality.*, quality/quality_callback.cpp)
// with the real classifier: configs/classifier_fashion_mnist.yaml as it is,
// trained once per build by the first test that needs it (the others wait for
// it and reuse it), and the demo GAN on the real Fashion-MNIST.
#include <fcntl.h>
#include <sys/file.h>

#include <cmath>
#include <filesystem>
#include <algorithm>
#include <map>
#include <set>

#include "data/load_images.hpp"
#include "io/png.hpp"
#include "quality/quality.hpp"

#include "support.hpp"

namespace fs = std::filesystem;
using gantry::test::run_gantry;
using gantry::test::TempDir;

namespace {

const std::string kClassifierConfig = gantry::test::source_path("configs/classifier_fashion_mnist.yaml");
const std::string kQualityConfig = gantry::test::source_path("configs/gan_fashion_mnist_quality.yaml");

// The classifier experiment's directory, trained for this build's plugin and
// config (remade when either changed). flock: one test process trains it.
std::string trained_classifier() {
  const fs::path dir = fs::path(GANTRY_TEST_WORK_DIR) / "classifier";
  fs::create_directories(dir);
  const int lock = ::open((dir / "lock").c_str(), O_CREAT | O_RDWR, 0644);
  EXPECT_GE(lock, 0);
  ::flock(lock, LOCK_EX);
  const std::string stamp =
      std::to_string(
          fs::last_write_time(std::string(GANTRY_PLUGIN_DIR) + "/libclassifier.so").time_since_epoch().count()) +
      "\n" + gantry::test::read_text(kClassifierConfig);
  if (gantry::test::read_text((dir / "done").string()) != stamp) {
    fs::remove_all(dir / "runs");
    const auto r = run_gantry("train '" + kClassifierConfig + "' trainer.progress=none monitor.enabled=false", dir);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    if (r.exit_code == 0) gantry::test::write_text((dir / "done").string(), stamp);
  }
  ::close(lock);  // releases the lock
  return (dir / "runs/classifier_fashion_mnist").string();
}

// metrics.csv's columns by name, one map per row ("" where a row has none).
std::vector<std::map<std::string, std::string>> csv_rows(const fs::path& file) {
  const auto lines = gantry::test::lines_of(gantry::test::read_text(file.string()));
  std::vector<std::map<std::string, std::string>> rows;
  if (lines.empty()) return rows;
  const auto header = gantry::test::split(lines[0], ',');
  for (size_t i = 1; i < lines.size(); ++i) {
    const auto cells = gantry::test::split(lines[i], ',');
    std::map<std::string, std::string> row;
    for (size_t c = 0; c < header.size(); ++c) row[header[c]] = c < cells.size() ? cells[c] : "";
    rows.push_back(row);
  }
  return rows;
}

// The rows that hold `column`, as (step, value).
std::vector<std::pair<int64_t, double>> column(const fs::path& file, const std::string& name) {
  std::vector<std::pair<int64_t, double>> out;
  for (auto& row : csv_rows(file))
    if (!row[name].empty()) out.emplace_back(std::stoll(row["step"]), std::stod(row[name]));
  return out;
}

const std::string kQuick = " trainer.progress=none monitor.enabled=false trainer.log_every_n_steps=50";

}  // namespace

// Real against real: the training split's first 10,000 images against the
// test split's statistics score near 0; uniform noise scores far above; the
// classifier itself reaches >= 90% on the test split.
TEST(Quality, TheClassifierReaches90PercentAndRealImagesScoreNearZero) {
  const std::string experiment = trained_classifier();
  const fs::path run = fs::path(experiment) / "latest";  // (its tensorboard/ folder is beside the run)
  const auto acc = column(run / "metrics.csv", "val_acc");
  ASSERT_EQ(acc.size(), 5u) << "one validation per epoch";
  EXPECT_GE(acc.back().second, 0.90) << "test accuracy after 5 epochs";

  gantry::FeatureModel model(experiment, torch::kCPU, "test");
  std::string note;
  const gantry::FeatureStats real = model.real_stats(500, &note);
  EXPECT_NE(note.find("cached in"), std::string::npos) << note;
  EXPECT_EQ(real.count, 10000);
  // The test split holds 1,000 images of each class; a 90% classifier sees
  // nearly that (ln 10 = 2.3026 exactly when balanced).
  EXPECT_GT(real.class_entropy(), 2.29);
  // The cache gives the same statistics, bit for bit.
  const gantry::FeatureStats again = model.real_stats(500, &note);
  EXPECT_NE(note.find("cached in"), std::string::npos) << note;
  EXPECT_TRUE(torch::equal(again.outer, real.outer));

  gantry::DataOptions data;
  const gantry::ImageDataset train = gantry::load_split(data, gantry::Split::kTrain, {1, 28, 28});
  gantry::FeatureStats train_stats;
  model.add_pixels(train.images.slice(0, 0, 10000), train_stats, 500);
  const double real_vs_real = gantry::frechet_distance(train_stats, real);

  torch::manual_seed(0);
  gantry::FeatureStats noise;
  model.add(torch::rand({10000, 1, 28, 28}) * 2 - 1, -1, 1, noise, 500);
  const double noise_vs_real = gantry::frechet_distance(noise, real);
  std::cout << "FD train vs test " << real_vs_real << ", noise vs test " << noise_vs_real << "; class entropy: test "
            << real.class_entropy() << ", train " << train_stats.class_entropy() << ", noise " << noise.class_entropy()
            << "\n";
  EXPECT_GE(real_vs_real, 0);
  EXPECT_LT(real_vs_real, 0.01 * noise_vs_real);
  EXPECT_EQ(gantry::frechet_distance(real, real), 0) << "a distribution against itself (clamped at 0)";
}

// The GAN's score falls as it trains; the score does not move the training
// (the same loss rows as without it); scoring a finished run again from its
// checkpoint gives the same value (deterministic for the seed).
TEST(Quality, TheScoreFallsAsTheGanTrainsLeavesItsLossesAndRepeats) {
  const std::string classifier = trained_classifier();
  TempDir scored, plain, again;
  const std::string args =
      "train '" + kQualityConfig + "'" + kQuick +
      " trainer.max_epochs=1 metrics.quality_every_n_steps=469 metrics.quality_classifier=" + classifier;
  // MKL (the torch wheel's BLAS) capped at AVX2, as on the AMD EPYC without
  // AVX-512 where this test passed so far: on an Intel Xeon with AVX-512 its kernels
  // sum in another order, and one epoch of this GAN then scored FD 696 -> 580
  // and class entropy 0.43 (deterministically; 696 -> 496 and 1.17 capped).
  // The amplification is the GAN's (the brief's warning), not the score's.
  // No effect on Debian's LibTorch 1.13 (OpenBLAS).
  const std::string avx2 = "MKL_ENABLE_INSTRUCTIONS=AVX2";
  auto r = run_gantry(args, scored.path(), avx2);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("quality at step 469: FD "), std::string::npos) << r.out;
  const fs::path run = scored.path() / "runs/gan_fashion_mnist_quality/latest";
  const auto fd = column(run / "metrics.csv", "quality_fd");
  const auto entropy = column(run / "metrics.csv", "quality_class_entropy");
  ASSERT_EQ(fd.size(), 3u);
  EXPECT_EQ(fd[0].first, 0);
  EXPECT_EQ(fd[1].first, 469);
  EXPECT_EQ(fd[2].first, 938);
  std::cout << "FD at steps 0, 469, 938: " << fd[0].second << ", " << fd[1].second << ", " << fd[2].second
            << "; class entropy " << entropy[0].second << ", " << entropy[1].second << ", " << entropy[2].second
            << "\n";
  // Measured here: 661 untrained, 440 after the epoch; the untrained
  // generator's samples fall in one class (entropy ~0), the trained one's in several.
  EXPECT_GT(fd[0].second, 1.3 * fd[2].second);
  EXPECT_LT(entropy[0].second, 0.3);
  EXPECT_GT(entropy[2].second, 0.8);

  // Without the score: the same losses, row for row.
  r = run_gantry("train '" + kQualityConfig + "'" + kQuick + " trainer.max_epochs=1 metrics.quality_every_n_steps=0",
                 plain.path(), avx2);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto plain_g = column(plain.path() / "runs/gan_fashion_mnist_quality/latest/metrics.csv", "g_loss");
  EXPECT_EQ(column(run / "metrics.csv", "g_loss"), plain_g);
  EXPECT_EQ(column(run / "metrics.csv", "d_loss"),
            column(plain.path() / "runs/gan_fashion_mnist_quality/latest/metrics.csv", "d_loss"));
  EXPECT_GT(plain_g.size(), 10u);

  // The finished run, resumed: no batch left, the end's score again.
  r = run_gantry(args + " trainer.resume=" + (run / "checkpoints/step_0000938.ckpt").string(), again.path(), avx2);
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto repeat = column(again.path() / "runs/gan_fashion_mnist_quality/latest/metrics.csv", "quality_fd");
  ASSERT_EQ(repeat.size(), 1u);
  // The same weights and seed give the same samples and features; the real
  // statistics may come from the cache, made by another process (another test)
  // whose thread count sums in another order: 2e-9 relative seen, 1e-7 allowed.
  EXPECT_EQ(repeat[0].first, fd[2].first);
  EXPECT_NEAR(repeat[0].second, fd[2].second, 1e-7 * fd[2].second);
}

// Two ranks generate half of the samples each: before any training (the
// same weights) the score equals one rank's, up to the order of the sums.
TEST(Quality, TwoRanksShareTheSamplesAndAgreeWithOne) {
  const std::string classifier = trained_classifier();
  TempDir one, two;
  const std::string args = " '" + kQualityConfig + "'" + kQuick +
                           " trainer.max_steps=2 metrics.quality_samples=4000 metrics.quality_classifier=" + classifier;
  auto r = run_gantry("train" + args, one.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  r = run_gantry("launch -n 2" + args, two.path());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const auto a = column(one.path() / "runs/gan_fashion_mnist_quality/latest/metrics.csv", "quality_fd");
  const auto b = column(two.path() / "runs/gan_fashion_mnist_quality/latest/metrics.csv", "quality_fd");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[0].first, 0);
  EXPECT_EQ(b[0].first, 0);
  // Float32 features summed in float64 in another order and batch split:
  // relative differences ~1e-7; the traces (~10^3) cancel into an FD of
  // ~10^2, so 1e-5 of it is a generous bound that a wrong shard (a sample
  // counted twice or missed) far exceeds.
  EXPECT_NEAR(a[0].second, b[0].second, 1e-5 * a[0].second) << "step 0 on 1 rank vs 2";
}

TEST(Quality, AMissingOrUnfitClassifierIsOneLineNamingIt) {
  TempDir dir;
  auto r = run_gantry(
      "train '" + kQualityConfig + "'" + kQuick + " trainer.max_steps=1 metrics.quality_classifier=no/such/dir",
      dir.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("metrics.quality_classifier: no/such/dir does not exist"), std::string::npos) << r.err;

  // A GAN checkpoint is no feature model: its plugin has no features().
  r = run_gantry("train '" + kQualityConfig + "'" + kQuick + " trainer.max_steps=1 metrics.quality_every_n_steps=0",
                 dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string gan = (dir.path() / "runs/gan_fashion_mnist_quality").string();
  r = run_gantry("train '" + kQualityConfig + "'" + kQuick + " trainer.max_steps=1 metrics.quality_classifier=" + gan,
                 dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("plugin gan's features() gives no [N, D] embedding"), std::string::npos) << r.err;

  // Samples of another shape than the classifier's (a GAN of 32x32 images,
  // on a folder of 4 of them).
  const fs::path images = dir.path() / "images";
  fs::create_directories(images);
  for (int i = 0; i < 4; ++i) {
    gantry::Image8 img;
    img.width = img.height = 32;
    img.channels = 1;
    img.pixels.assign(32 * 32, static_cast<uint8_t>(60 * i));
    gantry::test::write_text((images / ("img" + std::to_string(i) + ".png")).string(), gantry::encode_png(img));
  }
  r = run_gantry("train '" + kQualityConfig + "'" + kQuick +
                     " trainer.max_steps=1 system.height=32 system.width=32 data.format=image_folder data.batch_size=2"
                     " data.path=" +
                     images.string() + " metrics.quality_classifier=" + trained_classifier(),
                 dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("metrics.quality_classifier: plugin gan generates [1, 32, 32] samples, plugin classifier"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("embeds images [1, 28, 28]"), std::string::npos) << r.err;

  // gantry validate loads the classifier and checks the shape too, training nothing.
  r = run_gantry("validate '" + kQualityConfig + "' metrics.quality_classifier=" + trained_classifier(), dir.path());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("quality score: plugin classifier from "), std::string::npos) << r.out;
  r = run_gantry("validate '" + kQualityConfig +
                     "' system.height=32 system.width=32 data.format=image_folder data.path=" + images.string() +
                     " metrics.quality_classifier=" + trained_classifier(),
                 dir.path());
  EXPECT_NE(r.err.find("plugin gan generates [1, 32, 32] samples, plugin classifier"), std::string::npos) << r.err;
  r = run_gantry("validate '" + kQualityConfig + "' metrics.quality_classifier=", dir.path());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("metrics.quality_classifier must be a classifier checkpoint or run directory"),
            std::string::npos)
      << r.err;
}

// The score acts: with checkpoint.monitor=quality_fd the two lowest scores'
// checkpoints are kept (best.ckpt the lowest), and early stopping by it ends
// the run, on 1 and 2 ranks alike; a resume with more patience goes on. A
// min_delta larger than any score makes the stop step a matter of the rules
// alone (the first check is the best; `patience` checks later it stops),
// while which checkpoints are kept depends on the values, read back from
// metrics.csv.
TEST(Quality, TheScoreKeepsTheTwoBestCheckpointsAndStopsARunThatStoppedImproving) {
  const std::string classifier = trained_classifier();
  const std::string args = " '" + kQualityConfig + "'" + kQuick +
                           " data.batch_size=32 trainer.max_steps=400 metrics.quality_every_n_steps=20 "
                           "metrics.quality_samples=1000 metrics.quality_classifier=" +
                           classifier +
                           " checkpoint.monitor=quality_fd checkpoint.save_top_k=2 early_stopping.monitor=quality_fd "
                           "early_stopping.min_delta=1000000";
  for (const std::string launch : {"train", "launch -n 2"}) {
    TempDir dir;
    auto r = run_gantry(launch + args + " early_stopping.patience=2", dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    const fs::path run = dir.path() / "runs/gan_fashion_mnist_quality/latest";
    const auto fd = column(run / "metrics.csv", "quality_fd");
    ASSERT_GE(fd.size(), 3u) << launch;
    // Every score is a check; the first is the best, two later the run stops.
    const int64_t first = fd[0].first;
    EXPECT_NE(r.out.find("done at step " + std::to_string(first + 40) +
                         " (epoch 0): early stopping: quality_fd did not improve by 1e+06 for 2 checks (best"),
              std::string::npos)
        << launch << r.out;
    // The two lowest scores' checkpoints, and only those; best.ckpt the lowest.
    auto sorted = fd;
    std::stable_sort(sorted.begin(), sorted.end(), [](auto& a, auto& b) { return a.second < b.second; });
    std::set<std::string> expected, kept;
    for (size_t i = 0; i < 2; ++i) {
      char name[64];
      std::snprintf(name, sizeof name, "best_step_%07ld.ckpt", long(sorted[i].first));
      expected.insert(name);
    }
    for (const auto& e : fs::directory_iterator(run / "checkpoints"))
      if (e.path().filename().string().rfind("best_step_", 0) == 0) kept.insert(e.path().filename().string());
    EXPECT_EQ(kept, expected) << launch;
    char lowest[64];
    std::snprintf(lowest, sizeof lowest, "best_step_%07ld.ckpt", long(sorted[0].first));
    EXPECT_EQ(fs::read_symlink(run / "checkpoints/best.ckpt").filename().string(), lowest) << launch;
    EXPECT_NE(r.out.find("best: quality_fd "), std::string::npos) << r.out;
    if (launch != "train") continue;
    // Resumed with patience 4: two more checks, then it stops again.
    r = run_gantry(launch + args + " early_stopping.patience=4 trainer.resume=auto", dir.path());
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("done at step " + std::to_string(first + 80) +
                         " (epoch 0): early stopping: quality_fd did not improve by 1e+06 for 4 checks"),
              std::string::npos)
        << r.out;
  }
}

// Precision, recall and KID tell bad samples from missing modes, 2000 of
// each in the classifier's features (the score's M): real against real
// scores high on both and a KID near 0; a collapsed "generator" (10 real
// training images, each repeated 200 times) keeps its precision and loses
// its recall; bad samples (real images with their pixels shuffled: the same
// ink, no garment) lose their precision. Uniform noise loses its recall and
// scores a large KID, but its precision is not low: the classifier maps all
// noise into one tight cluster next to a few outlying real images whose k = 3
// balls are wide (k-NN precision's known weakness, Naeem et al. 2020), so it
// is printed, not checked; docs/quality.md has the numbers.
TEST(Quality, PrecisionRecallAndKidTellBadSamplesFromMissingModes) {
  gantry::FeatureModel model(trained_classifier(), torch::kCPU, "test");
  std::string note;
  const gantry::FeatureStats real = model.real_stats(500, &note, 2000);
  ASSERT_EQ(real.kept_features().size(0), 2000) << note;
  const torch::Tensor r = real.kept_features();

  gantry::DataOptions data;
  const gantry::ImageDataset train = gantry::load_split(data, gantry::Split::kTrain, {1, 28, 28});
  auto features_of = [&](const torch::Tensor& pixels) {
    gantry::FeatureStats s;
    s.keep = 2000;
    model.add_pixels(pixels, s, 500);
    return s.kept_features();
  };
  torch::manual_seed(0);
  const torch::Tensor same = features_of(train.images.slice(0, 0, 2000));
  const torch::Tensor collapsed = features_of(train.images.slice(0, 0, 10).repeat_interleave(200, 0));
  const torch::Tensor shuffled = features_of(
      train.images.slice(0, 2000, 4000).flatten(1).index_select(1, torch::randperm(28 * 28)).view({2000, 1, 28, 28}));
  const torch::Tensor noise = features_of((torch::rand({2000, 1, 28, 28}) * 255).to(torch::kUInt8));

  struct Score {
    const char* name;
    gantry::PrecisionRecall pr;
    double kid;
  };
  std::vector<Score> scores;
  for (const auto& [name, fake] :
       {std::pair{"real", same}, {"collapsed", collapsed}, {"shuffled", shuffled}, {"noise", noise}}) {
    scores.push_back({name, gantry::precision_recall(r, fake), gantry::kernel_distance(r, fake)});
    std::cout << "precision/recall/KID " << name << ": " << scores.back().pr.precision << " / "
              << scores.back().pr.recall << " / " << scores.back().kid << "\n";
  }
  const Score &same_s = scores[0], &collapsed_s = scores[1], &shuffled_s = scores[2], &noise_s = scores[3];
  // Two samples of one distribution: k = 3 balls cover most of the other
  // sample (the paper reports ~0.7-0.8 for real vs real at k = 3).
  EXPECT_GT(same_s.pr.precision, 0.6);
  EXPECT_GT(same_s.pr.recall, 0.6);
  EXPECT_GT(collapsed_s.pr.precision, 0.6) << "real images, so good samples";
  EXPECT_LT(collapsed_s.pr.recall, 0.1) << "10 images cover few of the real ones' modes";
  // Measured: 0.38 against 0.88 (LibTorch 1.13's classifier), 0.47 against
  // 0.87 (2.x's, trained anew by this test in that build), 0.64 against 0.89
  // (1.13 on an AMD EPYC without AVX-512: the classifier, trained here, is
  // another one on another CPU): at least a sixth of the samples fall out of
  // the real manifold wherever it was trained.
  EXPECT_LT(shuffled_s.pr.precision, same_s.pr.precision - 0.15) << "no garment in them";
  EXPECT_LT(shuffled_s.pr.recall, 0.05);
  EXPECT_LT(noise_s.pr.recall, 0.05);
  for (const Score* bad : {&collapsed_s, &shuffled_s, &noise_s})
    EXPECT_GT(bad->kid, 100 * std::abs(same_s.kid)) << bad->name;
  // The unbiased estimator is symmetric.
  EXPECT_NEAR(gantry::kernel_distance(r, same), gantry::kernel_distance(same, r), 1e-9 * noise_s.kid);
}
