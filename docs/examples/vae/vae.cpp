// A variational autoencoder with validation, written out of gantry's tree
// against the installed SDK (docs/plugins.md): an MLP encoder to a Gaussian
// latent, an MLP decoder back to pixels in [0, 1] (DataSpec low 0, high 1:
// the runner scales the images so), one Adam on the negative ELBO. forward()
// is the decoder: noise in, images out, as `gantry sample` and a server use
// it. Validation logs the ELBO's two parts per sample (validation_step) and,
// through SDK 1.3's hooks, the share of latent units in use over the whole
// split (on_validation_start/end: a statistic that is not a mean of batches).
#include <torch/torch.h>

#include <gantry/gantry.hpp>

namespace {

struct VaeImpl : torch::nn::Module {
  VaeImpl(int64_t pixels, int64_t hidden, int64_t latent)
      : enc(register_module("enc", torch::nn::Linear(pixels, hidden))),
        mu(register_module("mu", torch::nn::Linear(hidden, latent))),
        logvar(register_module("logvar", torch::nn::Linear(hidden, latent))),
        dec1(register_module("dec1", torch::nn::Linear(latent, hidden))),
        dec2(register_module("dec2", torch::nn::Linear(hidden, pixels))) {}
  std::pair<torch::Tensor, torch::Tensor> encode(const torch::Tensor& x) {
    const torch::Tensor h = torch::relu(enc(x.flatten(1)));
    return {mu(h), logvar(h)};
  }
  torch::Tensor decode(const torch::Tensor& z) { return torch::sigmoid(dec2(torch::relu(dec1(z)))); }
  torch::nn::Linear enc, mu, logvar, dec1, dec2;
};
TORCH_MODULE(Vae);

}  // namespace

class VaeSystem : public gantry::System {
 public:
  explicit VaeSystem(const gantry::Params& p)
      : latent_(p.get("latent_dim", int64_t{20})),
        lr_(p.get("lr", 1e-3)),
        vae_(28 * 28, p.get("hidden", int64_t{400}), latent_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    grid_z_ = torch::randn({64, latent_}, gen);
  }

  std::vector<gantry::NamedModule> modules() override { return {{"vae", vae_.ptr()}}; }
  torch::Tensor forward(const torch::Tensor& z) override { return vae_->decode(z).view({z.size(0), 1, 28, 28}); }
  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, latent_}); }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    return {{"vae", std::make_shared<torch::optim::Adam>(vae_->parameters(), torch::optim::AdamOptions(lr_))}};
  }
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const Parts l = loss(batch.input, /*sample=*/true);
    ctx.log("recon", l.recon);
    ctx.log("kl", l.kl);
    ctx.optimize("vae", l.recon + l.kl);  // the negative ELBO per sample
  }
  void on_validation_start(gantry::StepContext&) override { kl_per_unit_ = torch::zeros({latent_}); }
  void validation_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const Parts l = loss(batch.input, /*sample=*/false);  // the posterior mean: deterministic
    ctx.log("val_recon", l.recon);                          // means over every rank's samples
    ctx.log("val_loss", l.recon + l.kl);
    kl_per_unit_ += l.kl_units.sum(0).cpu();
    seen_ += batch.input.size(0);
  }
  void on_validation_end(gantry::StepContext& ctx) override {
    // Units whose mean KL exceeds 0.01 nats carry information ("active units").
    const double active = (kl_per_unit_ / double(std::max<int64_t>(seen_, 1)) > 0.01).sum().item<double>();
    ctx.log("val_active_units", active, gantry::Reduce::kMean, false);  // each rank's count, averaged over ranks
    seen_ = 0;
  }
  void log_samples(gantry::StepContext& ctx) override {
    ctx.log_image("generated", forward(grid_z_.to(ctx.device())));
  }
  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.shape = {1, 28, 28};
    spec.low = 0;  // pixels in [0, 1]: the decoder's sigmoid, and the BCE's target
    spec.high = 1;
    return spec;
  }

 private:
  struct Parts {
    torch::Tensor recon, kl, kl_units;
  };
  Parts loss(const torch::Tensor& images, bool sample) {
    auto [mu, logvar] = vae_->encode(images);
    const torch::Tensor z = sample ? mu + torch::randn_like(mu) * torch::exp(0.5 * logvar) : mu;
    const torch::Tensor x = images.flatten(1);
    const int64_t n = images.size(0);
    Parts p;
    p.recon = torch::binary_cross_entropy(vae_->decode(z), x, {}, at::Reduction::Sum) / double(n);
    p.kl_units = -0.5 * (1 + logvar - mu.pow(2) - logvar.exp());  // [n, latent]
    p.kl = p.kl_units.sum() / double(n);
    return p;
  }

  int64_t latent_;
  double lr_;
  Vae vae_;
  torch::Tensor grid_z_, kl_per_unit_;
  int64_t seen_ = 0;
};

GANTRY_PLUGIN(VaeSystem, "vae", "0.1.0", "a variational autoencoder with validation (docs/examples/vae)")
