// WGAN-GP (Gulrajani et al. 2017, "Improved Training of Wasserstein GANs",
// Algorithm 1) as a gantry plugin: an MLP generator and critic, n_critic = 5
// critic steps per generator step, each on a fresh batch (ctx.next_batch),
// the gradient penalty through a double backward, Adam(1e-4, betas (0, 0.9)).
// Two kinds of data (system.data):
//   images  Fashion-MNIST (the runner's IDX files), grids of samples
//   ring    8 Gaussians on a circle, made by the plugin (SDK 1.1 Dataset):
//           the image is a scatter plot of samples over the modes, and
//           log_samples logs how many modes the samples cover
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

#include <gantry/gantry.hpp>

namespace wgan_gp {

using torch::nn::Linear;

constexpr int kModes = 8;
constexpr double kRadius = 2.0;

struct Options {
  std::string data = "images";  // images | ring
  int64_t latent_dim = 100;
  int64_t channels = 1, height = 28, width = 28;
  std::vector<int64_t> generator_hidden{256, 512, 1024};
  std::vector<int64_t> critic_hidden{512, 256};
  double lr = 1e-4, b1 = 0.0, b2 = 0.9;
  int64_t n_critic = 5;
  double lambda_gp = 10;
  int64_t num_samples = 64;  // images: the fixed noise of the grids; ring: 1024 points
  int64_t sample_seed = 1234;
  int64_t ring_samples = 100000;
  double ring_std = 0.02;

  explicit Options(const gantry::Params& p) {
    data = p.get("data", data);
    TORCH_CHECK(data == "images" || data == "ring", "system.data must be images or ring, got '", data, "'");
    if (data == "ring") {  // the paper's toy setting: 2-D, 3 x 512 ReLU layers
      latent_dim = 2;
      generator_hidden = critic_hidden = {512, 512, 512};
      num_samples = 1024;
    }
    latent_dim = p.get("latent_dim", latent_dim);
    channels = p.get("channels", channels);
    height = p.get("height", height);
    width = p.get("width", width);
    generator_hidden = p.get("generator_hidden", generator_hidden);
    critic_hidden = p.get("critic_hidden", critic_hidden);
    lr = p.get("lr", lr);
    b1 = p.get("b1", b1);
    b2 = p.get("b2", b2);
    n_critic = p.get("n_critic", n_critic);
    lambda_gp = p.get("lambda_gp", lambda_gp);
    num_samples = p.get("num_samples", num_samples);
    sample_seed = p.get("sample_seed", sample_seed);
    ring_samples = p.get("ring_samples", ring_samples);
    ring_std = p.get("ring_std", ring_std);
    TORCH_CHECK(latent_dim > 0, "system.latent_dim must be > 0, got ", latent_dim);
    TORCH_CHECK(n_critic >= 1, "system.n_critic must be >= 1, got ", n_critic);
    TORCH_CHECK(lr > 0, "system.lr must be > 0, got ", lr);
    TORCH_CHECK(lambda_gp >= 0, "system.lambda_gp must be >= 0, got ", lambda_gp);
    TORCH_CHECK(ring_samples > 0 && ring_std > 0, "system.ring_samples and system.ring_std must be > 0");
    TORCH_CHECK(num_samples > 0, "system.num_samples must be > 0, got ", num_samples);
  }
  bool ring() const { return data == "ring"; }
  int64_t sample_size() const { return ring() ? 2 : channels * height * width; }
};

torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out, bool leaky) {
  torch::nn::Sequential m;
  for (int64_t h : hidden) {
    m->push_back(Linear(in, h));
    if (leaky)
      m->push_back(torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)));
    else
      m->push_back(torch::nn::ReLU());
    in = h;
  }
  m->push_back(Linear(in, out));
  return m;
}

// The 8 Gaussians; sample i from a generator seeded by i (every rank and
// every resume sees the same data).
class Ring : public gantry::Dataset {
 public:
  Ring(int64_t n, double std) : n_(n), std_(std) {}
  int64_t size() const override { return n_; }
  gantry::Batch get(int64_t i) const override {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(i));
    const int64_t mode = torch::randint(kModes, {1}, gen).item<int64_t>();
    gantry::Batch b;
    b.input = mode_centres()[mode] + std_ * torch::randn({2}, gen);
    return b;
  }
  static torch::Tensor mode_centres() {
    std::vector<float> xy;
    for (int k = 0; k < kModes; ++k) {
      const double a = 2 * M_PI * k / kModes;
      xy.push_back(float(kRadius * std::cos(a)));
      xy.push_back(float(kRadius * std::sin(a)));
    }
    return torch::tensor(xy).view({kModes, 2});
  }

 private:
  int64_t n_;
  double std_;
};

class WganGp : public gantry::System {
 public:
  explicit WganGp(const gantry::Params& params)
      : opt_(params),
        generator_(mlp(opt_.latent_dim, opt_.generator_hidden, opt_.sample_size(), false)),
        critic_(mlp(opt_.sample_size(), opt_.critic_hidden, 1, true)) {
    if (!opt_.ring()) generator_->push_back(torch::nn::Tanh());
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opt_.sample_seed);
    fixed_z_ = torch::randn({opt_.num_samples, opt_.latent_dim}, gen);
  }

  std::vector<gantry::NamedModule> modules() override {
    return {{"generator", generator_.ptr()}, {"critic", critic_.ptr()}};
  }
  torch::Tensor forward(const torch::Tensor& z) override {
    const torch::Tensor x = generator_->forward(z);
    return opt_.ring() ? x : x.view({z.size(0), opt_.channels, opt_.height, opt_.width});
  }
  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, opt_.latent_dim}); }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    auto adam = [&](torch::nn::Module& m) {
      return std::make_shared<torch::optim::Adam>(m.parameters(),
                                                  torch::optim::AdamOptions(opt_.lr).betas({opt_.b1, opt_.b2}));
    };
    return {{"g", adam(*generator_)}, {"d", adam(*critic_)}};
  }

  // Algorithm 1: n_critic critic steps, each on a fresh batch, then one
  // generator step. global_step counts these whole steps.
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    critic_step(batch.input, ctx);
    for (int64_t k = 1; k < opt_.n_critic; ++k) {
      const auto more = ctx.next_batch();
      if (!more) break;  // the epoch's last batches: a shorter round
      critic_step(more->input, ctx);
    }
    const torch::Tensor z = torch::randn({batch.input.size(0), opt_.latent_dim}, batch.input.options());
    const torch::Tensor g_loss = -critic(forward(z)).mean();
    ctx.log("g_loss", g_loss);
    ctx.optimize("g", g_loss);
  }

  void log_samples(gantry::StepContext& ctx) override {
    const torch::Tensor x = forward(fixed_z_.to(ctx.device())).cpu();
    if (!opt_.ring()) return ctx.log_image("generated", x);
    ctx.log_image("scatter", render_samples(x), 0, 1);
    // Mode coverage: a sample within 3 std of a mode counts for it.
    const torch::Tensor d = torch::cdist(x, Ring::mode_centres());  // [N, 8]
    const auto [dist, nearest] = d.min(1);
    const torch::Tensor close = dist < 3 * opt_.ring_std;
    const int64_t covered = std::get<0>(at::_unique(nearest.masked_select(close))).numel();
    ctx.log("modes_covered", double(covered));
    ctx.log("high_quality", close.to(torch::kFloat64).mean());  // the fraction within 3 std
  }

  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    if (opt_.ring()) {
      spec.kind = "ring";
      spec.shape = {2};
    } else {
      spec.shape = {opt_.channels, opt_.height, opt_.width};
    }
    return spec;
  }
  torch::Tensor render_samples(const torch::Tensor& samples) override {  // gantry sample
    return opt_.ring() ? scatter(samples.cpu().to(torch::kFloat32)) : torch::Tensor();
  }
  std::shared_ptr<gantry::Dataset> train_dataset() override {
    return opt_.ring() ? std::make_shared<Ring>(opt_.ring_samples, opt_.ring_std) : nullptr;
  }

 private:
  torch::Tensor critic(const torch::Tensor& x) { return critic_->forward(x.flatten(1)); }

  void critic_step(const torch::Tensor& real, gantry::StepContext& ctx) {
    const int64_t n = real.size(0);
    const torch::Tensor z = torch::randn({n, opt_.latent_dim}, real.options());
    const torch::Tensor fake = forward(z).detach();
    // Gradient penalty on random interpolates: (||grad D(x_hat)||_2 - 1)^2.
    std::vector<int64_t> eps_shape(real.dim(), 1);
    eps_shape[0] = n;
    const torch::Tensor eps = torch::rand(eps_shape, real.options());
    const torch::Tensor x_hat = (eps * real + (1 - eps) * fake).requires_grad_(true);
    const torch::Tensor d_hat = critic(x_hat);
    const torch::Tensor grad = torch::autograd::grad({d_hat}, {x_hat}, {torch::ones_like(d_hat)},
                                                     /*retain_graph=*/true, /*create_graph=*/true)[0];
    const torch::Tensor gp = (grad.flatten(1).norm(2, 1) - 1).pow(2).mean();
    const torch::Tensor wasserstein = critic(real).mean() - critic(fake).mean();
    const torch::Tensor d_loss = -wasserstein + opt_.lambda_gp * gp;
    ctx.log("d_loss", d_loss);
    ctx.log("wasserstein", wasserstein);  // the critic's estimate of W(real, generated)
    ctx.log("gp", gp);
    ctx.optimize("d", d_loss);
  }

  // Samples [N, 2] as white dots over the 8 modes (grey), [1, 3, 256, 256] in [0, 1];
  // the view spans [-3, 3] in both axes.
  static torch::Tensor scatter(const torch::Tensor& x) {
    constexpr int kSize = 256;
    torch::Tensor img = torch::zeros({3, kSize, kSize});
    auto put = [&](double px, double py, float r, float g, float b, int radius) {
      const int cx = int((px + 3) / 6 * kSize), cy = int((3 - py) / 6 * kSize);
      for (int dy = -radius; dy <= radius; ++dy)
        for (int dx = -radius; dx <= radius; ++dx) {
          const int u = cx + dx, v = cy + dy;
          if (u < 0 || v < 0 || u >= kSize || v >= kSize) continue;
          img[0][v][u] = r;
          img[1][v][u] = g;
          img[2][v][u] = b;
        }
    };
    const torch::Tensor centres = Ring::mode_centres();
    for (int k = 0; k < kModes; ++k)
      put(centres[k][0].item<double>(), centres[k][1].item<double>(), 0.4f, 0.4f, 0.4f, 6);
    const auto a = x.accessor<float, 2>();
    for (int64_t i = 0; i < x.size(0); ++i) put(a[i][0], a[i][1], 1, 1, 1, 0);
    return img.unsqueeze(0);
  }

  Options opt_;
  torch::nn::Sequential generator_, critic_;
  torch::Tensor fixed_z_;
};

}  // namespace wgan_gp

GANTRY_PLUGIN(wgan_gp::WganGp, "wgan_gp", "0.1.0",
              "WGAN-GP: MLP generator and critic, gradient penalty, n_critic 5 (images or the 8-Gaussian ring)")
