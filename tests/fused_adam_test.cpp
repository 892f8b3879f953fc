// The fused Adam: the same parameters and state as torch::optim::Adam over
// many steps (within float rounding), with weight decay, skipped parameters,
// transposed parameters, mixed with LibTorch's step (it shares the state),
// what it refuses, and a real GAN run with and without it. Adam stepped inside
// backward: bit-identical to backward then step. The transposed weight layout
// (weight_layout.hpp): which weights, what it keeps, and real runs with it.
#include <torch/torch.h>

#include "optim/fused_adam.hpp"
#include "support.hpp"
#include "train/trainer.hpp"
#include "train/weight_layout.hpp"

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
      const auto key = gantry::optimizer_state_key(ours[i]);
      const auto key_ref = gantry::optimizer_state_key(ref[i]);
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
    if (step < 5)
      mixed.step();
    else
      fused_adam_step(mixed);
  }
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_LT(max_rel_diff(ours[i], ref[i]), 1e-5) << i;
}

// DeviceAdam: ATen's fused multi-tensor Adam with the step and the lr in
// tensors (what a CUDA graph can replay), here on the CPU, where LibTorch 2.x
// has the same kernel: torch::optim::Adam's parameters, state and step counts
// within float rounding, skipped parameters and an lr changed midway (a
// schedule's) included; LibTorch's step continues from its state.
#if TORCH_VERSION_MAJOR >= 2
TEST(DeviceAdam, MatchesLibTorchAdamWithAScheduleAndContinuesWithIt) {
  for (double wd : {0.0, 0.01}) {
    auto ref = make_params(5), ours = clone_params(ref);
    auto opts = torch::optim::AdamOptions(2e-4).betas({0.5, 0.999}).weight_decay(wd);
    torch::optim::Adam plain(ref, opts);
    auto device = std::make_shared<torch::optim::Adam>(ours, opts);
    ASSERT_EQ(DeviceAdam::why_not(*device), "");
    DeviceAdam stepper(device);
    torch::manual_seed(6);
    for (int step = 0; step < 200; ++step) {
      if (step == 100)
        for (auto* o : {&plain, device.get()})
          static_cast<torch::optim::AdamOptions&>(o->param_groups()[0].options()).lr(5e-5);
      set_grads(ref, ours, step, step % 7 == 3);
      plain.step();
      if (step < 150)
        stepper.step();
      else
        device->step();  // LibTorch's own step takes over from DeviceAdam's state
    }
    for (size_t i = 0; i < ref.size(); ++i) {
      EXPECT_LT(max_rel_diff(ours[i], ref[i]), 1e-4) << "param " << i << ", weight_decay " << wd;
      EXPECT_GT((ours[i] - make_params(5)[i]).abs().max().item<double>(), 1e-4);  // it moved
      const auto& s = static_cast<torch::optim::AdamParamState&>(*device->state().at(optimizer_state_key(ours[i])));
      const auto& r = static_cast<torch::optim::AdamParamState&>(*plain.state().at(optimizer_state_key(ref[i])));
      EXPECT_EQ(s.step(), r.step()) << "param " << i;
      EXPECT_LT(max_rel_diff(s.exp_avg_sq(), r.exp_avg_sq()), 1e-4);
    }
  }
}

// The host bookkeeping of a captured step: what a recorded step advanced, a
// replay advances again, and a failed capture takes back.
TEST(DeviceAdam, RecordsReplaysAndUndoesHostStepCounts) {
  auto ps = make_params(7);
  auto opt = std::make_shared<torch::optim::Adam>(ps, torch::optim::AdamOptions(1e-3));
  DeviceAdam stepper(opt);
  auto host_steps = [&] {
    std::vector<int64_t> out;
    for (const auto& p : ps) {
      const auto it = opt->state().find(optimizer_state_key(p));
      out.push_back(it == opt->state().end() ? 0 : static_cast<torch::optim::AdamParamState&>(*it->second).step());
    }
    return out;
  };
  for (auto& p : ps) p.mutable_grad() = torch::ones_like(p);
  stepper.step();
  ps[1].mutable_grad().reset();  // the recorded step leaves this one out
  stepper.prepare();
  stepper.start_recording();
  stepper.step();
  stepper.stop_recording();
  EXPECT_EQ(host_steps(), (std::vector<int64_t>{2, 1, 2, 2, 2}));
  stepper.replayed();
  stepper.replayed();
  EXPECT_EQ(host_steps(), (std::vector<int64_t>{4, 1, 4, 4, 4}));
  stepper.start_recording();
  stepper.step();
  stepper.undo_recorded();
  EXPECT_EQ(host_steps(), (std::vector<int64_t>{4, 1, 4, 4, 4}));
}

TEST(DeviceAdam, RefusesWhatItCannotStep) {
  auto ps = make_params(8);
  EXPECT_NE(DeviceAdam::why_not(torch::optim::SGD(ps, 0.1)).find("not a torch::optim::Adam"), std::string::npos);
  EXPECT_NE(DeviceAdam::why_not(torch::optim::Adam(ps, torch::optim::AdamOptions(1e-3).amsgrad(true))).find("amsgrad"),
            std::string::npos);
  std::vector<torch::Tensor> transposed = {torch::randn({4, 8}).t().requires_grad_()};
  EXPECT_NE(DeviceAdam::why_not(torch::optim::Adam(transposed, 1e-3)).find("contiguous"), std::string::npos);
}
#else
TEST(DeviceAdam, IsUnavailableOnLibTorch1) {
  EXPECT_FALSE(DeviceAdam::available());
  auto ps = make_params(8);
  EXPECT_NE(DeviceAdam::why_not(torch::optim::Adam(ps, 1e-3)).find("LibTorch " TORCH_VERSION), std::string::npos);
}
#endif

TEST(FusedAdam, RefusesWhatItCannotDo) {
  auto ps = make_params(5);
  torch::optim::SGD sgd(ps, torch::optim::SGDOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(sgd));
  torch::optim::Adam ams(ps, torch::optim::AdamOptions(0.1).amsgrad(true));
  EXPECT_FALSE(fused_adam_applies(ams));
  std::vector<torch::Tensor> d{torch::randn({4}, torch::kFloat64).requires_grad_()};
  torch::optim::Adam dbl(d, torch::optim::AdamOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(dbl));
  std::vector<torch::Tensor> t{torch::randn({4, 6}).slice(1, 0, 3).detach().requires_grad_()};  // gaps
  torch::optim::Adam strided(t, torch::optim::AdamOptions(0.1));
  EXPECT_FALSE(fused_adam_applies(strided));
}

TEST(FusedAdam, TransposedParametersMatchLibTorchAdam) {
  // A column-major [64, 40] parameter (strides {1, 64}), as the weight layout
  // makes, with gradients in either layout: same result as LibTorch's Adam,
  // and the moments take the parameter's layout.
  torch::manual_seed(5);
  const auto init = torch::randn({64, 40});
  auto ref = std::vector<torch::Tensor>{init.clone().requires_grad_()};
  auto ours = std::vector<torch::Tensor>{init.t().contiguous().t().requires_grad_()};
  ASSERT_EQ(ours[0].strides(), (c10::IntArrayRef{1, 64}));
  torch::optim::Adam plain(ref, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam fused(ours, torch::optim::AdamOptions(1e-3));
  ASSERT_TRUE(fused_adam_applies(fused));
  for (int step = 0; step < 50; ++step) {
    const auto g = torch::randn({64, 40});
    ref[0].mutable_grad() = g.clone();
    ours[0].mutable_grad() = step % 2 ? g.clone() : g.t().contiguous().t();  // both layouts
    plain.step();
    fused_adam_step(fused);
  }
  EXPECT_LT(max_rel_diff(ours[0], ref[0]), 1e-5);
  EXPECT_EQ(ours[0].strides(), (c10::IntArrayRef{1, 64}));  // still transposed
  const auto& st = static_cast<torch::optim::AdamParamState&>(*fused.state().at(gantry::optimizer_state_key(ours[0])));
  EXPECT_EQ(st.exp_avg().strides(), ours[0].strides());
  EXPECT_EQ(st.exp_avg_sq().strides(), ours[0].strides());
}

TEST(FusedAdam, StateFollowsAParameterThatChangedLayout) {
  // A checkpoint from before trainer.weight_layout: row-major moments loaded
  // for a weight that is now transposed. The step re-lays them out once and
  // goes on as LibTorch's Adam does.
  torch::manual_seed(9);
  const auto init = torch::randn({32, 1024});
  auto ref = std::vector<torch::Tensor>{init.clone().requires_grad_()};
  auto ours = std::vector<torch::Tensor>{init.clone().requires_grad_()};
  torch::optim::Adam plain(ref, torch::optim::AdamOptions(1e-3));
  torch::optim::Adam fused(ours, torch::optim::AdamOptions(1e-3));
  for (int step = 0; step < 20; ++step) {
    if (step == 10) {
      torch::NoGradGuard no_grad;
      ours[0].set_data(ours[0].t().contiguous().t());
    }
    const auto g = torch::randn({32, 1024});
    ref[0].mutable_grad() = g.clone();
    ours[0].mutable_grad() = g.clone();
    plain.step();
    fused_adam_step(fused);
  }
  EXPECT_LT(max_rel_diff(ours[0], ref[0]), 1e-5);
  const auto& st = static_cast<torch::optim::AdamParamState&>(*fused.state().at(gantry::optimizer_state_key(ours[0])));
  EXPECT_EQ(st.exp_avg().strides(), (c10::IntArrayRef{1, 32}));
  EXPECT_EQ(st.step(), 20);
}

namespace {

// A little model where backward is not a chain: w is used twice (its gradient
// is the sum of two), b only on one branch, and `unused` is not reached.
struct Net {
  torch::Tensor w, b, unused;
  std::vector<torch::Tensor> params() const { return {w, b, unused}; }
  torch::Tensor loss(const torch::Tensor& x) const {
    const auto h = torch::tanh(x.mm(w.t()) + b);
    return (h.mm(w) - x).pow(2).mean();
  }
};

Net make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return {torch::randn({5, 8}).requires_grad_(), torch::randn({5}).requires_grad_(),
          torch::randn({3}).requires_grad_()};
}

}  // namespace

TEST(AdamInBackward, SameBitsAsBackwardThenStep) {
  Net a = make_net(6), b = make_net(6);
  auto opt_a = std::make_shared<torch::optim::Adam>(a.params(), torch::optim::AdamOptions(1e-2));
  auto opt_b = std::make_shared<torch::optim::Adam>(b.params(), torch::optim::AdamOptions(1e-2));
  AdamInBackward in_backward(opt_b, b.params());
  torch::manual_seed(7);
  for (int step = 0; step < 30; ++step) {
    const auto x = torch::randn({16, 8});
    if (step == 10) {  // a gradient left by an earlier backward, on a parameter this one does not reach
      a.unused.mutable_grad() = torch::ones({3});
      b.unused.mutable_grad() = torch::ones({3});
    }
    a.loss(x).backward({}, c10::nullopt, false, a.params());
    fused_adam_step(*opt_a);
    for (auto& p : a.params()) p.mutable_grad().reset();
    in_backward.backward_and_step(b.loss(x));
    for (const auto& p : b.params()) EXPECT_FALSE(p.grad().defined());
  }
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(torch::equal(a.params()[i], b.params()[i])) << "param " << i;
  EXPECT_FALSE(torch::equal(a.unused, make_net(6).unused));  // stepped once, at step 10
  EXPECT_FALSE(torch::equal(a.w, make_net(6).w));            // not vacuous
  // Outside backward_and_step the hooks do nothing: a plain backward only accumulates.
  const auto before = b.w.detach().clone();
  b.loss(torch::randn({16, 8})).backward();
  EXPECT_TRUE(torch::equal(b.w, before));
  EXPECT_TRUE(b.w.grad().defined());
}

TEST(WeightLayout, WhichWeightsAreTransposed) {
  EXPECT_TRUE(prefers_transposed_weight(784, 1024));  // the GAN's last generator layer
  EXPECT_TRUE(prefers_transposed_weight(10, 2048));
  EXPECT_FALSE(prefers_transposed_weight(1024, 512));   // rows of 2 KiB
  EXPECT_FALSE(prefers_transposed_weight(1024, 1024));  // columns would alias as badly
  EXPECT_FALSE(prefers_transposed_weight(512, 784));

  torch::manual_seed(8);
  torch::nn::Sequential net(torch::nn::Linear(100, 1024), torch::nn::ReLU(), torch::nn::Linear(1024, 784),
                            torch::nn::Linear(784, 2048), torch::nn::Linear(2048, 2048));
  const auto x = torch::randn({64, 100});
  const auto before = net->forward(x).detach();
  std::vector<torch::Tensor> params = net->parameters();
  torch::optim::Adam opt(params, torch::optim::AdamOptions(1e-3));
  const auto w2 = net[2]->as<torch::nn::Linear>()->weight.detach().clone();
  EXPECT_EQ(transpose_linear_weights(*net, "net"), std::vector<std::string>{"net.2.weight"});
  const auto& w = net[2]->as<torch::nn::Linear>()->weight;
  EXPECT_EQ(w.sizes(), (c10::IntArrayRef{784, 1024}));
  EXPECT_EQ(w.strides(), (c10::IntArrayRef{1, 784}));
  EXPECT_TRUE(torch::equal(w, w2));
  EXPECT_EQ(w.unsafeGetTensorImpl(), params[2].unsafeGetTensorImpl());  // the optimizer's own tensor
  EXPECT_TRUE(torch::allclose(net->forward(x), before, 1e-5, 1e-5));
  EXPECT_TRUE(transpose_linear_weights(*net).empty());  // done once
}

namespace {

// Comparing two configurations of one GAN run. They multiply in another order
// (a transposed weight takes another GEMM kernel; the fused Adam rounds in
// another order), and which kernels OpenBLAS picks depends on the CPU (AVX2,
// AVX-512, Intel, AMD): the difference starts at float rounding and the GAN's
// dynamics amplify it step by step (40 steps: 1e-4 to 2e-3 relative, CPU
// dependent). So compare the first steps only, where it is still rounding:
// float32's unit roundoff is 6e-8; a 1024-term product has a typical
// relative error of sqrt(1024) * 6e-8 = 2e-6 (worst case 1024 * 6e-8 = 6e-5),
// and the loss averages 64 samples of five layers of such products.
// Measured under OPENBLAS_CORETYPE Haswell, Zen, SkylakeX, Sandybridge,
// Nehalem and Prescott: steps 1-3 bit-identical (docs/BENCHMARKS.md, "Tests
// across CPUs"); 40 steps: up to 1.6e-4. kRoundingTol sits between typical
// rounding (2e-6) and the worst case (6e-5); a real defect moves the losses
// far more (a learning rate 1% off: 1.6e-3; a permuted weight: 8.4e-4).
constexpr double kRoundingTol = 3e-5;
constexpr int kSteps = 3;

// g_loss and d_loss of each of the first steps of a run (one metrics row per step).
std::vector<std::pair<double, double>> first_losses(const std::vector<std::string>& overrides, const std::string& dir,
                                                    int steps = kSteps) {
  std::vector<std::string> o = {"system.plugin=" + gantry::test::gan_plugin_path(),
                                "trainer.max_steps=" + std::to_string(steps), "trainer.log_every_n_steps=1",
                                "trainer.progress=none", "trainer.threads=1"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  const auto cfg = ExperimentConfig::load(gantry::test::kDemo, o);
  const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
  Trainer(Experiment::build(cfg, data), dir).fit();
  std::vector<std::pair<double, double>> out;
  const auto g = gantry::test::column_by_step(dir + "/metrics.csv", "g_loss");
  const auto d = gantry::test::column_by_step(dir + "/metrics.csv", "d_loss");
  for (const auto& [step, value] : g) out.emplace_back(std::stod(value), std::stod(d.at(step)));
  return out;
}

// Largest relative difference between two runs' losses, step by step.
double max_rel_loss_diff(const std::vector<std::pair<double, double>>& a,
                         const std::vector<std::pair<double, double>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    worst = std::max(worst, std::abs(a[i].first - b[i].first) / std::abs(b[i].first));
    worst = std::max(worst, std::abs(a[i].second - b[i].second) / std::abs(b[i].second));
  }
  return worst;
}

}  // namespace

TEST(WeightLayout, GanRunsTheSameAndSavesContiguousWeights) {
  // The GAN's 1024 -> 784 layer is transposed by default: its first steps
  // give the same losses as without, up to float rounding; the checkpoint
  // holds the weight contiguous; a run resumed from it continues the same in
  // either layout.
  TempDir base;
  std::map<std::string, std::vector<std::pair<double, double>>> losses;
  for (std::string layout : {"auto", "as_built"})
    losses[layout] = first_losses({"trainer.weight_layout=" + layout}, base / layout);
  ASSERT_EQ(losses["auto"].size(), size_t(kSteps));
  const double fresh = max_rel_loss_diff(losses["auto"], losses["as_built"]);
  EXPECT_LT(fresh, kRoundingTol);
  const auto sd = gantry::test::state_dict_of(base / "auto/checkpoints/step_0000003.ckpt");
  const auto w = sd.at("generator.model.11.weight").toTensor();
  EXPECT_EQ(w.sizes(), (c10::IntArrayRef{784, 1024}));
  EXPECT_TRUE(w.is_contiguous());

  // The transposed run's checkpoint resumed in both layouts, 3 more steps.
  const std::string from = base / "auto/checkpoints/step_0000003.ckpt";
  std::map<std::string, std::vector<std::pair<double, double>>> resumed;
  for (std::string layout : {"auto", "as_built"}) {
    resumed[layout] = first_losses({"trainer.weight_layout=" + layout, "trainer.resume=" + from},
                                   base / ("resumed_" + layout), 2 * kSteps);
    ASSERT_EQ(resumed[layout].size(), size_t(kSteps)) << layout;  // steps 4..6
  }
  const double after_resume = max_rel_loss_diff(resumed["auto"], resumed["as_built"]);
  EXPECT_LT(after_resume, kRoundingTol);
  std::cout << "largest relative loss difference, steps 1-3: " << fresh << ", after resume: " << after_resume << "\n";
}

TEST(AdamInBackward, GanRunIsBitIdentical) {
  // trainer.step_in_backward (the default) against the fused step after backward.
  std::map<bool, std::vector<std::string>> rows;
  for (bool in_backward : {true, false}) {
    TempDir dir;
    const auto cfg = ExperimentConfig::load(
        gantry::test::kDemo, {"system.plugin=" + gantry::test::gan_plugin_path(), "trainer.max_steps=40",
                              "trainer.log_every_n_steps=5", "trainer.progress=none", "trainer.threads=1",
                              std::string("trainer.step_in_backward=") + (in_backward ? "true" : "false")});
    const auto data = load_idx_images(cfg.data.path, cfg.data.train_prefix);
    Trainer(Experiment::build(cfg, data), dir.path().string()).fit();
    for (const auto& row :
         gantry::test::lines_of(gantry::test::rows_without_wall_time(gantry::test::read_text(dir / "metrics.csv"))))
      rows[in_backward].push_back(row);
  }
  ASSERT_EQ(rows[true].size(), 9u);
  EXPECT_EQ(rows[true], rows[false]);
}

TEST(FusedAdam, GanRunMatchesLibTorchAdam) {
  // The first real GAN steps with and without the fused step: the same
  // matrix products (the same BLAS path), so the losses differ only by the
  // Adam update's rounding; step 1's g_loss comes before any update and is
  // exact. Not vacuous: a learning rate 1% off is far outside the bound.
  TempDir dir;
  const auto fused = first_losses({"trainer.fused_adam=true"}, dir / "fused");
  const auto plain = first_losses({"trainer.fused_adam=false"}, dir / "plain");
  ASSERT_EQ(fused.size(), size_t(kSteps));
  EXPECT_EQ(fused[0].first, plain[0].first);
  const double diff = max_rel_loss_diff(fused, plain);
  EXPECT_LT(diff, kRoundingTol);
  const auto off = first_losses({"trainer.fused_adam=true", "system.lr=0.000202"}, dir / "lr_off");
  const double wrong = max_rel_loss_diff(off, plain);
  EXPECT_GT(wrong, 3 * kRoundingTol);
  std::cout << "largest relative loss difference, steps 1-" << kSteps << ": " << diff << " (lr 1% off: " << wrong
            << ")\n";
}
