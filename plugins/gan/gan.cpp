// The classic GAN, as in Lightning's basic GAN tutorial: an MLP generator and
// discriminator, two Adam optimizers, a generator step then a discriminator step
// per batch. Every hyper-parameter comes from the config's `system:` section.
#include <torch/torch.h>

#include <gantry/gantry.hpp>

namespace gan {

using torch::nn::BatchNorm1d;
using torch::nn::BatchNorm1dOptions;
using torch::nn::LeakyReLU;
using torch::nn::LeakyReLUOptions;
using torch::nn::Linear;

struct GanOptions {
  int64_t latent_dim = 100;
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  std::vector<int64_t> generator_hidden{128, 256, 512, 1024};
  std::vector<int64_t> discriminator_hidden{512, 256};
  double bn_eps = 0.8;  // BatchNorm1d(out, 0.8) in the tutorial: eps, not momentum
  double leaky_slope = 0.2;
  double lr = 2e-4;
  double b1 = 0.5;
  double b2 = 0.999;
  int64_t num_samples = 64;  // fixed noise batch for the image grids
  int64_t sample_seed = 1234;

  explicit GanOptions(const gantry::Params& p) {
    latent_dim = p.get("latent_dim", latent_dim);
    channels = p.get("channels", channels);
    height = p.get("height", height);
    width = p.get("width", width);
    generator_hidden = p.get("generator_hidden", generator_hidden);
    discriminator_hidden = p.get("discriminator_hidden", discriminator_hidden);
    bn_eps = p.get("bn_eps", bn_eps);
    leaky_slope = p.get("leaky_slope", leaky_slope);
    lr = p.get("lr", lr);
    b1 = p.get("b1", b1);
    b2 = p.get("b2", b2);
    num_samples = p.get("num_samples", num_samples);
    sample_seed = p.get("sample_seed", sample_seed);
    TORCH_CHECK(latent_dim > 0, "system.latent_dim must be > 0, got ", latent_dim);
    TORCH_CHECK(channels > 0 && height > 0 && width > 0, "system.channels, system.height and system.width must be > 0");
    TORCH_CHECK(!generator_hidden.empty(), "system.generator_hidden must list at least one width");
    TORCH_CHECK(lr > 0, "system.lr must be > 0, got ", lr);
    TORCH_CHECK(b1 >= 0 && b1 < 1, "system.b1 must be in [0, 1), got ", b1);
    TORCH_CHECK(b2 >= 0 && b2 < 1, "system.b2 must be in [0, 1), got ", b2);
    TORCH_CHECK(num_samples > 0, "system.num_samples must be > 0, got ", num_samples);
  }
  int64_t image_size() const { return channels * height * width; }
};

// Layers are appended one by one (not Sequential(a, b, c) in one call) so that
// they are built, and randomly initialised, in order.
struct GeneratorImpl : torch::nn::Module {
  explicit GeneratorImpl(const GanOptions& o) : shape_{o.channels, o.height, o.width} {
    int64_t in = o.latent_dim;
    for (size_t i = 0; i < o.generator_hidden.size(); ++i) {
      const int64_t out = o.generator_hidden[i];
      model->push_back(Linear(in, out));
      if (i > 0) model->push_back(BatchNorm1d(BatchNorm1dOptions(out).eps(o.bn_eps)));
      model->push_back(LeakyReLU(LeakyReLUOptions().negative_slope(o.leaky_slope).inplace(true)));
      in = out;
    }
    model->push_back(Linear(in, o.image_size()));
    model->push_back(torch::nn::Tanh());
    register_module("model", model);
  }

  torch::Tensor forward(const torch::Tensor& z) {
    return model->forward(z).view({z.size(0), shape_[0], shape_[1], shape_[2]});
  }

  std::array<int64_t, 3> shape_;
  torch::nn::Sequential model;
};
TORCH_MODULE(Generator);

struct DiscriminatorImpl : torch::nn::Module {
  explicit DiscriminatorImpl(const GanOptions& o) {
    int64_t in = o.image_size();
    for (int64_t out : o.discriminator_hidden) {
      model->push_back(Linear(in, out));
      model->push_back(LeakyReLU(LeakyReLUOptions().negative_slope(o.leaky_slope).inplace(true)));
      in = out;
    }
    model->push_back(Linear(in, 1));  // a logit: the loss is BCE with logits
    register_module("model", model);
  }

  torch::Tensor forward(const torch::Tensor& img) { return model->forward(img.flatten(1)); }

  torch::nn::Sequential model;
};
TORCH_MODULE(Discriminator);

class Gan : public gantry::System {
 public:
  explicit Gan(const gantry::Params& params) : opt_(params), generator_(opt_), discriminator_(opt_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opt_.sample_seed);
    validation_z_ = torch::randn({opt_.num_samples, opt_.latent_dim}, gen);
  }

  std::vector<gantry::NamedModule> modules() override {
    return {{"generator", generator_.ptr()}, {"discriminator", discriminator_.ptr()}};
  }

  torch::Tensor forward(const torch::Tensor& z) override { return generator_(z); }

  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, opt_.latent_dim}); }

  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    auto adam = [&](torch::nn::Module& m) {
      return std::make_shared<torch::optim::Adam>(m.parameters(),
                                                  torch::optim::AdamOptions(opt_.lr).betas({opt_.b1, opt_.b2}));
    };
    return {{"g", adam(*generator_)}, {"d", adam(*discriminator_)}};
  }

  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const torch::Tensor& imgs = batch.input;
    const torch::Tensor z = torch::randn({imgs.size(0), opt_.latent_dim}, imgs.options());
    const torch::Tensor valid = torch::ones({imgs.size(0), 1}, imgs.options());
    const torch::Tensor fake = torch::zeros({imgs.size(0), 1}, imgs.options());

    // train generator: make the discriminator call the generated images real
    const torch::Tensor generated = forward(z);
    const torch::Tensor g_loss = adversarial_loss(discriminator_(generated), valid);
    ctx.log("g_loss", g_loss);
    ctx.optimize("g", g_loss);

    // train discriminator: tell real from generated (detached) images
    const torch::Tensor real_loss = adversarial_loss(discriminator_(imgs), valid);
    const torch::Tensor fake_loss = adversarial_loss(discriminator_(generated.detach()), fake);
    const torch::Tensor d_loss = (real_loss + fake_loss) / 2;
    ctx.log("d_loss", d_loss);
    ctx.optimize("d", d_loss);
  }

  void log_samples(gantry::StepContext& ctx) override {
    ctx.log_image("generated", forward(validation_z_.to(ctx.device())));
  }

  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.shape = {opt_.channels, opt_.height, opt_.width};
    return spec;
  }

 private:
  static torch::Tensor adversarial_loss(const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::binary_cross_entropy_with_logits(logits, target);
  }

  GanOptions opt_;
  Generator generator_;
  Discriminator discriminator_;
  torch::Tensor validation_z_;
};

}  // namespace gan

GANTRY_PLUGIN(gan::Gan, "gan", "0.1.0", "Lightning's basic GAN: MLP generator and discriminator, two Adams")
