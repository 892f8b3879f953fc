// A conditional GAN, written out of gantry's tree against the installed SDK
// (docs/plugins.md): the basic GAN's MLPs with the class as a one-hot beside
// the noise (generator) and beside the image (discriminator). forward()
// takes noise and one-hot packed in one tensor [N, latent + classes], so a
// server still gives it one input; SDK 1.3's conditional_input(labels) packs
// it for `gantry sample --labels 0,1,2`.
#include <torch/torch.h>

#include <gantry/gantry.hpp>

namespace {

torch::nn::Sequential mlp(int64_t in, const std::vector<int64_t>& hidden, int64_t out, bool batch_norm) {
  torch::nn::Sequential m;
  for (size_t i = 0; i < hidden.size(); ++i) {
    m->push_back(torch::nn::Linear(in, hidden[i]));
    if (batch_norm && i > 0) m->push_back(torch::nn::BatchNorm1d(torch::nn::BatchNorm1dOptions(hidden[i]).eps(0.8)));
    m->push_back(torch::nn::LeakyReLU(torch::nn::LeakyReLUOptions().negative_slope(0.2)));
    in = hidden[i];
  }
  m->push_back(torch::nn::Linear(in, out));
  return m;
}

}  // namespace

class ConditionalGan : public gantry::System {
 public:
  explicit ConditionalGan(const gantry::Params& p)
      : latent_(p.get("latent_dim", int64_t{100})),
        classes_(p.get("classes", int64_t{10})),
        lr_(p.get("lr", 2e-4)),
        generator_(mlp(latent_ + classes_, {128, 256, 512}, 28 * 28, true)),
        discriminator_(mlp(28 * 28 + classes_, {512, 256}, 1, false)) {
    TORCH_CHECK(classes_ > 1, "system.classes must be > 1, got ", classes_);
    // The grids' fixed input: 8 samples of each class, class i in column i
    // (with trainer.grid_rows: 8, a row holds one of each).
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1234);  // not the global generator: the run's seed stays
    grid_input_ = torch::cat({torch::randn({8 * classes_, latent_}, gen), one_hot(torch::arange(8 * classes_) % classes_)}, 1);
  }

  std::vector<gantry::NamedModule> modules() override {
    return {{"generator", generator_.ptr()}, {"discriminator", discriminator_.ptr()}};
  }
  // [N, latent + classes] -> images [N, 1, 28, 28] in [-1, 1].
  torch::Tensor forward(const torch::Tensor& input) override {
    return torch::tanh(generator_->forward(input)).view({input.size(0), 1, 28, 28});
  }
  torch::Tensor sample_input(int64_t n) override {  // classes drawn uniformly
    return conditional_input(torch::randint(classes_, {n}, torch::kInt64));
  }
  torch::Tensor conditional_input(const torch::Tensor& labels) override {
    TORCH_CHECK(labels.numel() == 0 || (labels.min().item<int64_t>() >= 0 && labels.max().item<int64_t>() < classes_),
                "labels must be in [0, ", classes_, ")");
    return torch::cat({torch::randn({labels.size(0), latent_}), one_hot(labels)}, 1);
  }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    auto adam = [&](torch::nn::Module& m) {
      return std::make_shared<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(lr_).betas({0.5, 0.999}));
    };
    return {{"g", adam(*generator_)}, {"d", adam(*discriminator_)}};
  }
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const torch::Tensor& images = batch.input;
    const int64_t n = images.size(0);
    const torch::Tensor labels = one_hot(batch.target);  // the data's classes
    const torch::Tensor z = torch::randn({n, latent_}, images.options());
    const torch::Tensor real = torch::ones({n, 1}, images.options()), fake = torch::zeros({n, 1}, images.options());
    const torch::Tensor generated = forward(torch::cat({z, labels}, 1));
    const torch::Tensor g_loss = bce(judge(generated, labels), real);
    ctx.log("g_loss", g_loss);
    ctx.optimize("g", g_loss);
    const torch::Tensor d_loss = (bce(judge(images, labels), real) + bce(judge(generated.detach(), labels), fake)) / 2;
    ctx.log("d_loss", d_loss);
    ctx.optimize("d", d_loss);
  }
  void log_samples(gantry::StepContext& ctx) override {
    ctx.log_image("generated", forward(grid_input_.to(ctx.device())));
  }
  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.shape = {1, 28, 28};
    return spec;
  }

 private:
  torch::Tensor one_hot(const torch::Tensor& labels) const {
    return torch::one_hot(labels.to(torch::kInt64), classes_).to(torch::kFloat32);
  }
  torch::Tensor judge(const torch::Tensor& images, const torch::Tensor& labels) {
    return discriminator_->forward(torch::cat({images.flatten(1), labels}, 1));
  }
  static torch::Tensor bce(const torch::Tensor& logits, const torch::Tensor& target) {
    return torch::binary_cross_entropy_with_logits(logits, target);
  }

  int64_t latent_, classes_;
  double lr_;
  torch::nn::Sequential generator_, discriminator_;
  torch::Tensor grid_input_;
};

GANTRY_PLUGIN(ConditionalGan, "cgan", "0.1.0", "a conditional GAN (docs/examples/cgan)")
