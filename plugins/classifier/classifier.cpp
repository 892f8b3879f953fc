// A small CNN classifier (two conv + pool stages, a 128-wide hidden layer,
// the class logits), trained by gantry like any system: cross-entropy, one
// Adam. It proves the runner is not GAN-only, and it is the frozen feature
// extractor of the sample-quality score (`metrics.quality_classifier`): its
// features() is the hidden layer, forward() the logits (SDK 1.2).
// configs/classifier_fashion_mnist.yaml reaches 91.3% test accuracy on
// Fashion-MNIST in 5 epochs (57 s on 2 cores).
#include <torch/torch.h>

#include <gantry/gantry.hpp>

namespace classifier {

using torch::nn::Conv2d;
using torch::nn::Conv2dOptions;
using torch::nn::Linear;

struct Options {
  int64_t channels = 1;
  int64_t height = 28;
  int64_t width = 28;
  int64_t classes = 10;
  std::vector<int64_t> conv{32, 64};  // channels of the two conv stages (3x3, ReLU, 2x2 max-pool)
  int64_t hidden = 128;               // the features' width
  double dropout = 0.25;              // before the logits, in training
  double lr = 1e-3;

  explicit Options(const gantry::Params& p) {
    channels = p.get("channels", channels);
    height = p.get("height", height);
    width = p.get("width", width);
    classes = p.get("classes", classes);
    conv = p.get("conv", conv);
    hidden = p.get("hidden", hidden);
    dropout = p.get("dropout", dropout);
    lr = p.get("lr", lr);
    TORCH_CHECK(channels > 0 && height >= 4 && width >= 4,
                "system.channels must be > 0 and system.height, system.width >= 4");
    TORCH_CHECK(classes >= 2, "system.classes must be >= 2, got ", classes);
    TORCH_CHECK(conv.size() == 2 && conv[0] > 0 && conv[1] > 0,
                "system.conv must list two channel counts > 0, e.g. [32, 64]");
    TORCH_CHECK(hidden > 0, "system.hidden must be > 0, got ", hidden);
    TORCH_CHECK(dropout >= 0 && dropout < 1, "system.dropout must be in [0, 1), got ", dropout);
    TORCH_CHECK(lr > 0, "system.lr must be > 0, got ", lr);
  }
};

struct NetImpl : torch::nn::Module {
  explicit NetImpl(const Options& o)
      : conv1(Conv2dOptions(o.channels, o.conv[0], 3).padding(1)),
        conv2(Conv2dOptions(o.conv[0], o.conv[1], 3).padding(1)),
        fc(o.conv[1] * (o.height / 4) * (o.width / 4), o.hidden),
        head(o.hidden, o.classes),
        dropout(o.dropout) {
    register_module("conv1", conv1);
    register_module("conv2", conv2);
    register_module("fc", fc);
    register_module("head", head);
  }

  torch::Tensor features(const torch::Tensor& x) {
    torch::Tensor h = torch::max_pool2d(torch::relu(conv1(x)), 2);
    h = torch::max_pool2d(torch::relu(conv2(h)), 2);
    return torch::relu(fc(h.flatten(1)));
  }
  torch::Tensor forward(const torch::Tensor& x) { return head(torch::dropout(features(x), dropout, is_training())); }

  Conv2d conv1, conv2;
  Linear fc, head;
  double dropout;
};
TORCH_MODULE(Net);

class Classifier : public gantry::System {
 public:
  explicit Classifier(const gantry::Params& params) : opt_(params), net_(opt_) {}

  std::vector<gantry::NamedModule> modules() override { return {{"net", net_.ptr()}}; }

  torch::Tensor forward(const torch::Tensor& images) override { return net_(images); }

  /// Uniform noise images in the data's range [-1, 1].
  torch::Tensor sample_input(int64_t n) override {
    return torch::rand({n, opt_.channels, opt_.height, opt_.width}) * 2 - 1;
  }

  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    return {{"adam", std::make_shared<torch::optim::Adam>(net_->parameters(), torch::optim::AdamOptions(opt_.lr))}};
  }

  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    TORCH_CHECK(batch.target.defined(), "the classifier needs labelled data (data.path's label files)");
    const torch::Tensor logits = forward(batch.input);
    const torch::Tensor loss = torch::cross_entropy_loss(logits, batch.target);
    ctx.log("loss", loss);
    ctx.log("acc", logits.argmax(1).eq(batch.target).to(torch::kFloat32).mean());
    ctx.optimize("adam", loss);
  }

  void validation_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    TORCH_CHECK(batch.target.defined(), "the classifier needs labelled validation data");
    const torch::Tensor logits = forward(batch.input);
    ctx.log("val_loss", torch::cross_entropy_loss(logits, batch.target));
    ctx.log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat32).mean());
  }

  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.shape = {opt_.channels, opt_.height, opt_.width};
    return spec;
  }

  torch::Tensor features(const torch::Tensor& images) override { return net_->features(images); }

 private:
  Options opt_;
  Net net_;
};

}  // namespace classifier

GANTRY_PLUGIN(classifier::Classifier, "classifier", "0.1.0",
              "a small CNN classifier (2 conv stages, 128 features); the feature extractor of the quality score")
