// The fused Adam: the same parameters and state as torch::optim::Adam over
// many steps (within float rounding), with weight decay, skipped parameters,
// mixed with LibTorch's step (it shares the state), what it refuses, and a
// real GAN run with and without it.
#include <torch/torch.h>

#include "fused_adam.hpp"
#include "support.hpp"
#include "trainer.hpp"

using namespace gantry;
using gantry::test::TempDir;

namespace {

// Parameters of awkward sizes: a scalar, odd lengths, one bigger than a
// parallel chunk (16384), a matrix.
std::vector<torch::Tensor> make_params(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<torch::Tensor> ps;
  for (auto shape : std::vector<std::vector<int64_t>>{{1}, {7}, {33, 3}, {20001}, {256, 130}})
    ps.push_back(torch::randn(shape).requires_grad_());
  return ps;
}

std::vector<torch::Tensor> clone_params(const std::vector<torch::Tensor>& ps) {
  std::vector<torch::Tensor> out;
  for (const auto& p : ps) out.push_back(p.detach().clone().requires_grad_());
  return out;
}

void set_grads(std::vector<torch::Tensor>& a, std::vector<torch::Tensor>& b, int step, bool skip_one) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (skip_one && i == 1) {  // this parameter got no gradient this step
      a[i].mutable_grad().reset();
      b[i].mutable_grad().reset();
      continue;
    }
    const auto g = torch::randn_like(a[i]) * (1.0 + step % 5);
    a[i].mutable_grad() = g.clone();
    b[i].mutable_grad() = g.clone();
  }
}

double max_rel_diff(const torch::Tensor& a, const torch::Tensor& b) {
  return ((a - b).abs() / (b.abs() + 1e-6)).max().item<double>();
}

}  // namespace

TEST(FusedAdam, MatchesLibTorchAdamOverManySteps) {
  for (double wd : {0.0, 0.01}) {
    auto ref = make_params(1), ours = clone_params(ref);
    torch::optim::Adam plain(ref, torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}).weight_decay(wd));
    torch::optim::Adam fused(ours, torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}).weight_decay(wd));
    ASSERT_TRUE(fused_adam_applies(fused));
    torch::manual_seed(2);
    for (int step = 0; step < 300; ++step) {
      set_grads(ref, ours, step, step % 7 == 3);
      plain.step();
      fused_adam_step(fused);
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LT(max_rel_diff(ours[i], ref[i]), 1e-4) << "param " << i << ", weight_decay " << wd;
      // Not vacuous: the parameters moved.
      EXPECT_GT((ours[i] - make_params(1)[i]).abs().max().item<double>(), 1e-3);
      const auto key = c10::guts::to_string(ours[i].unsafeGetTensorImpl());
      const auto key_ref = c10::guts::to_string(ref[i].unsafeGetTensorImpl());
      const auto& s = static_cast<torch::optim::AdamParamState&>(*fused.state().at(key));
      const auto& r = static_cast<torch::optim::AdamParamState&>(*plain.state().at(key_ref));
      EXPECT_EQ(s.step(), r.step()) << "param " << i;  // the skipped steps are skipped by both
      EXPECT_LT(max_rel_diff(s.exp_avg_sq(), r.exp_avg_sq()), 1e-4);
      EXPECT_TRUE(torch::allclose(s.exp_avg(), r.exp_avg(), 1e-4, 1e-7));
    }
    double worst = 0;
    for (size_t i = 0; i < ref.size(); ++i) worst = std::max(worst, (ours[i] - ref[i]).abs().max().item<double>());
    std::cout << "weight_decay " << wd << ": largest difference after 300 steps " << worst << "\n";
  }
}

TEST(FusedAdam, SharesItsStateWithLibTorchsStep) {
  // 5 LibTorch steps then 5 fused on the same optimizer == 10 LibTorch steps:
  // a checkpoint written by either continues with either.
  auto ref = make_params(3), ours = clone_params(ref);
  torch::optim::Adam plain(ref, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam mixed(ours, torch::optim::AdamOptions(1e-3));
  torch::manual_seed(4);
  for (int step = 0; step < 10; ++step) {
    set_grads(ref, ours, step, false);
    plain.step();
    if (step < 5) mixed.step();
    else fused_adam_step(mixed);
  }
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(max_rel_diff(ours[i], ref[i]), 1e-5) << i;
}

TEST(FusedAdam, RefusesWhatItCannotDo) {
  auto ps = make_params(5);
  torch::optim::SGD sgd(ps, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(sgd));
  torch::optim::Adam ams(ps, torch::optim::AdamOptions(0.1).amsgrad(true));
  EXPECT_FALSE(fused_adam_applies(ams));
  std::vector<torch::Tensor> d{torch::randn({4}, torch::kFloat64).requires_grad_()};
  torch::optim::Adam dbl(d, torch::optim::AdamOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(dbl));
  std::vector<torch::Tensor> t{torch::randn({4, 3}).t().detach().requires_grad_()};  // not contiguous
  torch::optim::Adam strided(t, torch::optim::AdamOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(strided));
}

TEST(FusedAdam, GanRunMatchesLibTorchAdam) {
  // 40 real GAN steps with and without the fused step: the same losses up to
  // float rounding (the run is chaotic, so the bound is loose but far below
  // what a wrong update gives: lr 2x off moves g_loss by > 1e-2 in 40 steps).
  std::map<bool, std::vector<std::string>> rows;
  for (bool fused : {true, false}) {
    TempDir dir;
    const auto cfg = ExperimentConfig::load(
        gantry::test::source_path("configs/gan_fashion_mnist.yaml"),
        {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=40",
         "trainer.log_every_n_steps=10", "trainer.progress=none", "checkpoint.every_n_steps=0",
         "trainer.threads=1", std::string("trainer.fused_adam=") + (fused ? "true" : "false")});
    const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
    Trainer(Experiment::build(cfg), dir.path().string()).fit(data);
    rows[fused] = gantry::test::lines_of(gantry::test::read_text(dir / "metrics.csv"));
  }
  ASSERT_EQ(rows[true].size(), 5u);
  ASSERT_EQ(rows[false].size(), 5u);
  for (size_t i = 1; i < 5; ++i) {
    const auto a = gantry::test::split(rows[true][i], ','), b = gantry::test::split(rows[false][i], ',');
    for (size_t c : {3u, 4u}) {
      const double x = std::stod(a[c]), y = std::stod(b[c]);
      EXPECT_NEAR(x, y, 2e-3 * std::abs(y)) << rows[true][i] << " vs " << rows[false][i];
    }
  }
}
