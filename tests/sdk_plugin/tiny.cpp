// A minimal gantry plugin: a linear classifier on the image data. Built twice:
// in-tree as the loader tests' good plugin, and out of tree against the
// installed SDK (CMakeLists.txt beside it) to prove find_package(gantry) works.
#include <torch/torch.h>

#include <cmath>

#include <gantry/gantry.hpp>

#if GANTRY_ABI_VERSION_MINOR >= 1
#include <ATen/CPUGeneratorImpl.h>

// SDK 1.1: data the system brings itself, no files. A ring of 8 Gaussians
// (radius 2, std 0.05), labelled by mode; sample i is drawn from a generator
// seeded by i, so every rank and every resume sees the same sample.
class Ring : public gantry::Dataset {
 public:
  Ring(int64_t n, uint64_t seed) : n_(n), seed_(seed) {}
  int64_t size() const override { return n_; }
  gantry::Batch get(int64_t i) const override {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(seed_ + static_cast<uint64_t>(i));
    const int64_t mode = i % 8;
    const double a = 2 * M_PI * double(mode) / 8;
    gantry::Batch b;
    b.input = torch::tensor({2 * std::cos(a), 2 * std::sin(a)}, torch::kFloat32) +
              0.05f * torch::randn({2}, gen, torch::kFloat32);
    b.target = torch::tensor(mode, torch::kInt64);
    return b;
  }

 private:
  int64_t n_;
  uint64_t seed_;
};
#endif

class Tiny : public gantry::System {
 public:
  explicit Tiny(const gantry::Params& p)
      : lr_(p.get("lr", 0.1)),
        pixels_(p.get("pixels", int64_t{784})),
        kind_(p.get("kind", "images")),
        hand_step_(p.get("hand_step", false)),
        log_steps_(p.get("log_steps", false)),
        split_step_(p.get("split_step", false)),
        synthetic_(p.get("synthetic", false)),
        extra_batches_(p.get("extra_batches", int64_t{0})),
        lr_halve_every_(p.get("lr_halve_every", int64_t{0})),
        lr_schedule_of_(p.get("lr_schedule_of", std::string("sgd"))),
        nan_at_(p.get("nan_at", int64_t{-1})),
        model_(pixels_, 10) {
    if (p.get("fail", false)) throw std::runtime_error("asked to fail (system.fail=true)");
#if GANTRY_ABI_VERSION_MINOR >= 3
    stop_at_ = p.get("stop_at", int64_t{-1});
    stop_rank_ = p.get("stop_rank", int64_t{-1});
    run_seed_ = std::stoll(p.config_value("trainer.seed"));  // a key outside system:
#endif
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
    // system.nan_at: the loss logged at that step is NaN (the training itself goes on as ever)
    ctx.log("loss", ctx.global_step() == nan_at_ ? loss * std::nan("") : loss);
#if GANTRY_ABI_VERSION_MINOR >= 3
    // system.stop_at (system.stop_rank: on that rank only): the plugin's own stopping rule.
    if (ctx.global_step() == stop_at_ && (stop_rank_ < 0 || ctx.rank() == stop_rank_))
      ctx.request_stop("target reached (system.stop_at=" + std::to_string(stop_at_) + ")");
#endif
    if (log_steps_) {  // system.log_steps: values whose rows are known exactly (the metrics test)
      ctx.log("batch_index", double(ctx.global_step()));
      if (ctx.global_step() % 50 == 0) ctx.log("every_50", double(ctx.global_step()));
    }
#if GANTRY_ABI_VERSION_MINOR >= 1
    // SDK 1.1 (the frozen 1.0 build of this file has none of it).
    ++steps_seen_;  // plain-member state, checkpointed through extra_state()
    if (log_steps_) {
      ctx.log("steps_seen", torch::scalar_tensor(double(steps_seen_)), gantry::Reduce::kLast, false);
      ctx.log("loss_max", loss, gantry::Reduce::kMax, false);
    }
    if (extra_batches_ > 0) {  // system.extra_batches: more optimizer steps on fresh batches (n_critic)
      ctx.optimize("sgd", loss);
      int64_t used = 1;
      for (int64_t k = 0; k < extra_batches_; ++k) {
        const auto more = ctx.next_batch();
        if (!more) break;
        ctx.optimize("sgd", torch::cross_entropy_loss(forward(more->input), more->target));
        ++used;
      }
      ctx.log("batches", torch::scalar_tensor(double(used)), gantry::Reduce::kSum, false);
      return;
    }
    if (split_step_) {  // system.split_step: backward, look at the averaged gradients, step
      ctx.backward("sgd", loss);
      double sq = 0;
      for (const auto& p : model_->parameters()) sq += p.grad().pow(2).sum().item<double>();
      ctx.log("grad_norm", std::sqrt(sq));
      ctx.step("sgd");
      return;
    }
#endif
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
#if GANTRY_ABI_VERSION_MINOR >= 1
  gantry::StateDict extra_state() override { return {{"steps_seen", torch::tensor(steps_seen_)}}; }
  void load_extra_state(const gantry::StateDict& state) override {
    for (const auto& [name, t] : state)
      if (name == "steps_seen") steps_seen_ = t.item<int64_t>();
  }
  // system.lr_halve_every: a schedule of the plugin's own, halving the lr
  // every n batches (system.lr_schedule_of: the optimizer it names; tests).
  std::vector<gantry::LrLambda> configure_schedulers() override {
    if (lr_halve_every_ <= 0) return {};
    const int64_t n = lr_halve_every_;
    gantry::LrLambda halve;
    halve.optimizer = lr_schedule_of_;
    halve.factor = [n](int64_t t) { return std::pow(0.5, double(t / n)); };
    return {halve};
  }
#endif
  void validation_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    ctx.log("val_loss", torch::cross_entropy_loss(forward(batch.input), batch.target));
#if GANTRY_ABI_VERSION_MINOR >= 3
    ++val_batches_;
#endif
  }
#if GANTRY_ABI_VERSION_MINOR >= 3
  // SDK 1.3: a pass's start and end; what the end logs joins the validation row.
  void on_validation_start(gantry::StepContext&) override { val_batches_ = 0; }
  // A "conditional" input: the class in the first value (tests read it back).
  torch::Tensor conditional_input(const torch::Tensor& labels) override {
    auto x = torch::randn({labels.size(0), pixels_});
    x.select(1, 0).copy_(labels.to(torch::kFloat32));
    return x;
  }
  void on_validation_end(gantry::StepContext& ctx) override {
    ctx.log("val_batches", double(val_batches_), gantry::Reduce::kSum, false);  // summed over the ranks
    ctx.log("run_seed", double(run_seed_), gantry::Reduce::kLast, false);
  }
#endif
#if GANTRY_ABI_VERSION_MINOR >= 1
  // system.synthetic: the ring above (with system.pixels=2), 4096 samples to
  // train on and 512 others to validate on.
  std::shared_ptr<gantry::Dataset> train_dataset() override {
    return synthetic_ ? std::make_shared<Ring>(4096, 0) : nullptr;
  }
  std::shared_ptr<gantry::Dataset> val_dataset() override {
    return synthetic_ ? std::make_shared<Ring>(512, 1u << 20) : nullptr;
  }
#endif
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
  bool split_step_;
  bool synthetic_;
  int64_t extra_batches_;
  int64_t lr_halve_every_;
  std::string lr_schedule_of_;
  int64_t nan_at_;
  int64_t stop_at_ = -1, stop_rank_ = -1, run_seed_ = 0, val_batches_ = 0;  // SDK 1.3
  int64_t steps_seen_ = 0;
  torch::nn::Linear model_;
  std::shared_ptr<torch::optim::SGD> optimizer_;
};

GANTRY_PLUGIN(Tiny, "tiny", "1.0.0", "a linear classifier (gantry's SDK test plugin)")
