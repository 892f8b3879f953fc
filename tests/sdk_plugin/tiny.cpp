// A minimal gantry plugin: a linear classifier on the image data. Built twice:
// in-tree as the loader tests' good plugin, and out of tree against the
// installed SDK (CMakeLists.txt beside it) to prove find_package(gantry) works.
#include <torch/torch.h>

#include <gantry/gantry.hpp>

class Tiny : public gantry::System {
 public:
  explicit Tiny(const gantry::Params& p)
      : lr_(p.get("lr", 0.1)),
        pixels_(p.get("pixels", int64_t{784})),
        kind_(p.get("kind", "images")),
        hand_step_(p.get("hand_step", false)),
        log_steps_(p.get("log_steps", false)),
        model_(pixels_, 10) {
    if (p.get("fail", false)) throw std::runtime_error("asked to fail (system.fail=true)");
  }

  std::vector<gantry::NamedModule> modules() override { return {{"model", model_.ptr()}}; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_(x.flatten(1)); }
  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, pixels_}); }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    optimizer_ = std::make_shared<torch::optim::SGD>(model_->parameters(), lr_);
    return {{"sgd", optimizer_}};
  }
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    const auto loss = torch::cross_entropy_loss(forward(batch.input), batch.target);
    ctx.log("loss", loss);
    if (log_steps_) {  // system.log_steps: values whose rows are known exactly (the metrics test)
      ctx.log("batch_index", double(ctx.global_step()));
      if (ctx.global_step() % 50 == 0) ctx.log("every_50", double(ctx.global_step()));
    }
    if (!hand_step_) return ctx.optimize("sgd", loss);
    // system.hand_step: what a plugin author might write instead of
    // ctx.optimize; it skips DDP's gradient average (tests: the run must fail).
    optimizer_->zero_grad();
    loss.backward();
    optimizer_->step();
  }
  void log_samples(gantry::StepContext& ctx) override {
    if (log_steps_) ctx.log("sampled_at", double(ctx.global_step()));
  }
  gantry::DataSpec data_spec() const override {
    gantry::DataSpec spec;
    spec.kind = kind_;
    return spec;
  }

 private:
  double lr_;
  int64_t pixels_;
  std::string kind_;  // system.kind: the data kind asked for (tests: one the runner lacks)
  bool hand_step_;
  bool log_steps_;
  torch::nn::Linear model_;
  std::shared_ptr<torch::optim::SGD> optimizer_;
};

GANTRY_PLUGIN(Tiny, "tiny", "1.0.0", "a linear classifier (gantry's SDK test plugin)")
