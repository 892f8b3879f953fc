// A minimal gantry plugin: a linear classifier on the image data. Built twice:
// in-tree as the loader tests' good plugin, and out of tree against the
// installed SDK (CMakeLists.txt beside it) to prove find_package(gantry) works.
#include <torch/torch.h>

#include <gantry/gantry.hpp>

class Tiny : public gantry::System {
 public:
  explicit Tiny(const gantry::Params& p)
      : lr_(p.get("lr", 0.1)), pixels_(p.get("pixels", int64_t{784})), model_(pixels_, 10) {
    if (p.get("fail", false)) throw std::runtime_error("asked to fail (system.fail=true)");
  }

  std::vector<gantry::NamedModule> modules() override { return {{"model", model_.ptr()}}; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_(x.flatten(1)); }
  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, pixels_}); }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    return {{"sgd", std::make_shared<torch::optim::SGD>(model_->parameters(), lr_)}};
  }
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const auto loss = torch::cross_entropy_loss(forward(batch.input), batch.target);
    ctx.log("loss", loss);
    ctx.optimize("sgd", loss);
  }

 private:
  double lr_;
  int64_t pixels_;
  torch::nn::Linear model_;
};

GANTRY_PLUGIN(Tiny, "tiny", "1.0.0", "a linear classifier (gantry's SDK test plugin)")
