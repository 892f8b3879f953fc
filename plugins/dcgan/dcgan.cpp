// DCGAN (Radford et al. 2016) as the PyTorch examples write it (pytorch/examples
// dcgan/main.py, and cpp/dcgan for 28x28 MNIST): transposed-convolution
// generator and convolutional discriminator with BatchNorm, weights drawn from
// N(0, 0.02), two Adams (2e-4, betas (0.5, 0.999)), per batch a discriminator
// step on real and generated images, then a generator step on the same
// generated images. Two sizes (system.height = system.width):
//   28  the cpp/dcgan example's layers (Fashion-MNIST, 1 channel)
//   32  the 64x64 example with one up/down-sampling stage less (CIFAR-10's
//       32x32x3, data.format cifar10, or any image folder resized to it)
// One difference: the discriminator ends in a logit and the loss is BCE with
// logits (the examples' Sigmoid + BCELoss, computed stably).
#include <torch/torch.h>

#include <ATen/CPUGeneratorImpl.h>

#include <gantry/gantry.hpp>

namespace dcgan {

using torch::nn::BatchNorm2d;
using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::ConvTranspose2d;
using torch::nn::ConvTranspose2dOptions;

struct Options {
  int64_t latent_dim = 100;  // nz
  int64_t channels = 1;      // nc
  int64_t size = 28;         // height = width: 28 or 32
  int64_t ngf = 64;          // generator width (the last hidden layer's channels)
  int64_t ndf = 64;          // discriminator width (the first layer's channels)
  double lr = 2e-4, b1 = 0.5, b2 = 0.999;
  int64_t num_samples = 64;  // the fixed noise of the grids
  int64_t sample_seed = 1234;

  explicit Options(const gantry::Params& p) {
    latent_dim = p.get("latent_dim", latent_dim);
    channels = p.get("channels", channels);
    const int64_t height = p.get("height", size);
    const int64_t width = p.get("width", height);
    ngf = p.get("ngf", ngf);
    ndf = p.get("ndf", ndf);
    lr = p.get("lr", lr);
    b1 = p.get("b1", b1);
    b2 = p.get("b2", b2);
    num_samples = p.get("num_samples", num_samples);
    sample_seed = p.get("sample_seed", sample_seed);
    TORCH_CHECK(height == width && (height == 28 || height == 32),
                "system.height and system.width must both be 28 or both 32, got ", height, "x", width);
    size = height;
    TORCH_CHECK(channels == 1 || channels == 3, "system.channels must be 1 or 3, got ", channels);
    TORCH_CHECK(latent_dim > 0, "system.latent_dim must be > 0, got ", latent_dim);
    TORCH_CHECK(ngf > 0 && ndf > 0, "system.ngf and system.ndf must be > 0, got ", ngf, " and ", ndf);
    TORCH_CHECK(lr > 0, "system.lr must be > 0, got ", lr);
    TORCH_CHECK(b1 >= 0 && b1 < 1 && b2 >= 0 && b2 < 1, "system.b1 and system.b2 must be in [0, 1)");
    TORCH_CHECK(num_samples > 0, "system.num_samples must be > 0, got ", num_samples);
  }
};

ConvTranspose2d up(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
  return ConvTranspose2d(ConvTranspose2dOptions(in, out, k).stride(s).padding(p).bias(false));
}
Conv2d down(int64_t in, int64_t out, int64_t k, int64_t s, int64_t p) {
  return Conv2d(Conv2dOptions(in, out, k).stride(s).padding(p).bias(false));
}

// weights_init of the examples: convolutions N(0, 0.02), BatchNorm weight
// N(1, 0.02) and bias 0. Drawn in the order the layers were built.
void init_weights(torch::nn::Module& m) {
  torch::NoGradGuard no_grad;
  for (auto& layer : m.modules(/*include_self=*/false)) {
    if (layer->as<torch::nn::Conv2dImpl>() || layer->as<torch::nn::ConvTranspose2dImpl>()) {
      layer->named_parameters(false)["weight"].normal_(0.0, 0.02);
    } else if (layer->as<torch::nn::BatchNorm2dImpl>()) {
      layer->named_parameters(false)["weight"].normal_(1.0, 0.02);
      layer->named_parameters(false)["bias"].zero_();
    }
  }
}

// noise [N, nz] -> images [N, nc, size, size] in [-1, 1].
struct GeneratorImpl : torch::nn::Module {
  explicit GeneratorImpl(const Options& o) : latent_dim_(o.latent_dim) {
    const int64_t g = o.ngf;
    auto block = [&](torch::nn::AnyModule conv, int64_t out) {
      model->push_back(std::move(conv));
      model->push_back(BatchNorm2d(out));
      model->push_back(torch::nn::ReLU(torch::nn::ReLUOptions(true)));
    };
    block(torch::nn::AnyModule(up(o.latent_dim, g * 4, 4, 1, 0)), g * 4);  // 4x4
    if (o.size == 28)
      block(torch::nn::AnyModule(up(g * 4, g * 2, 3, 2, 1)), g * 2);  // 7x7
    else
      block(torch::nn::AnyModule(up(g * 4, g * 2, 4, 2, 1)), g * 2);  // 8x8
    block(torch::nn::AnyModule(up(g * 2, g, 4, 2, 1)), g);            // 14 / 16
    model->push_back(up(g, o.channels, 4, 2, 1));                     // 28 / 32
    model->push_back(torch::nn::Tanh());
    register_module("model", model);
    init_weights(*this);
  }
  torch::Tensor forward(const torch::Tensor& z) { return model->forward(z.view({z.size(0), latent_dim_, 1, 1})); }

  int64_t latent_dim_;
  torch::nn::Sequential model;
};
TORCH_MODULE(Generator);

// images -> one logit per image.
struct DiscriminatorImpl : torch::nn::Module {
  explicit DiscriminatorImpl(const Options& o) {
    const int64_t d = o.ndf;
    auto leaky = [] { return torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2).inplace(true)); };
    model->push_back(down(o.channels, d, 4, 2, 1));  // 14 / 16
    model->push_back(leaky());
    model->push_back(down(d, d * 2, 4, 2, 1));  // 7 / 8
    model->push_back(BatchNorm2d(d * 2));
    model->push_back(leaky());
    model->push_back(down(d * 2, d * 4, 4, 2, 1));  // 3 / 4
    model->push_back(BatchNorm2d(d * 4));
    model->push_back(leaky());
    model->push_back(down(d * 4, 1, o.size == 28 ? 3 : 4, 1, 0));  // 1x1
    register_module("model", model);
    init_weights(*this);
  }
  torch::Tensor forward(const torch::Tensor& img) { return model->forward(img).view({img.size(0), 1}); }

  torch::nn::Sequential model;
};
TORCH_MODULE(Discriminator);

class Dcgan : public gantry::System {
 public:
  explicit Dcgan(const gantry::Params& params) : opt_(params), generator_(opt_), discriminator_(opt_) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(opt_.sample_seed);
    fixed_noise_ = torch::randn({opt_.num_samples, opt_.latent_dim}, gen);
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
    return {{"d", adam(*discriminator_)}, {"g", adam(*generator_)}};
  }

  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const torch::Tensor& real = batch.input;
    const int64_t n = real.size(0);
    const torch::Tensor ones = torch::ones({n, 1}, real.options());
    const torch::Tensor zeros = torch::zeros({n, 1}, real.options());

    // (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
    const torch::Tensor fake = generator_(torch::randn({n, opt_.latent_dim}, real.options()));
    const torch::Tensor d_real = discriminator_(real);
    const torch::Tensor d_fake = discriminator_(fake.detach());
    const torch::Tensor d_loss = bce(d_real, ones) + bce(d_fake, zeros);
    ctx.log("d_loss", d_loss);
    ctx.log("d_x", torch::sigmoid(d_real).mean());
    ctx.optimize("d", d_loss);

    // (2) Update G: maximize log(D(G(z))), through the updated D
    const torch::Tensor g_loss = bce(discriminator_(fake), ones);
    ctx.log("g_loss", g_loss);
    ctx.optimize("g", g_loss);
  }

  void log_samples(gantry::StepContext& ctx) override {
    ctx.log_image("generated", forward(fixed_noise_.to(ctx.device())));
  }

  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.shape = {opt_.channels, opt_.size, opt_.size};
    return spec;
  }

 private:
  static torch::Tensor bce(const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::binary_cross_entropy_with_logits(logits, target);
  }

  Options opt_;
  Generator generator_;
  Discriminator discriminator_;
  torch::Tensor fixed_noise_;
};

}  // namespace dcgan

GANTRY_PLUGIN(dcgan::Dcgan, "dcgan", "0.1.0",
              "DCGAN (the PyTorch example): transposed-convolution generator, convolutional discriminator")
