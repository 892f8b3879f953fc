// A plugin that throws from the hook `system.throw_in` names (default: its
// constructor), with LibTorch's TORCH_CHECK (whose message carries a C++
// backtrace): every hook's failure must reach the user as the same one line,
// `plugin throws: <hook> failed[ at step N]: boom in <hook>` (PluginSystem).
// `system.crash` (segv, abort, throw42) crashes training_step after
// `system.crash_after` steps instead: a plugin bug the runner cannot catch;
// throw_in or crash dataset_get, dataset_throw42, dataset_segv: the training
// dataset's get() (on the loader's thread) from its 20th call on;
// `system.hang_on_rank` R loops forever there on rank R (the process lives,
// its heartbeat goes on). `system.slow_rank` R sleeps `system.slow_ms` in
// each training_step on rank R from step `system.slow_from` to before
// `system.slow_until` (-1: the end): a straggler. `system.hide_module` trains a second Linear that
// modules() does not return (a plugin author's silent mistake);
// `system.log_val_n` logs validation values with Reduce::kSum and kMax.
// Otherwise a working system: a linear regression on `system.samples` (8)
// samples of its own, sample i's inputs all i; `system.record` P appends
// "epoch step i i ..." (the samples of each training batch) to P.rank<R>.
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <thread>
#include <string>

#include <gantry/gantry.hpp>

namespace {

class Eight : public gantry::Dataset {
 public:
  // `fault`: "dataset_get" throws (TORCH_CHECK), "dataset_throw42" throws 42,
  // "dataset_segv" crashes, in the 20th get() and after (the loader's thread).
  explicit Eight(int64_t n = 8, std::string fault = "") : n_(n), fault_(std::move(fault)) {}
  int64_t size() const override { return n_; }
  gantry::Batch get(int64_t i) const override {
    if (!fault_.empty() && ++gets_ >= 20) {
      TORCH_CHECK(fault_ != "dataset_get", "boom in dataset_get");
      if (fault_ == "dataset_throw42") throw 42;
      if (fault_ == "dataset_segv") *static_cast<volatile int*>(nullptr) = 1;
    }
    gantry::Batch b;
    b.input = torch::full({4}, double(i), torch::kFloat32);
    b.target = torch::full({1}, double(i) / 2, torch::kFloat32);
    return b;
  }

 private:
  int64_t n_;
  std::string fault_;
  mutable std::atomic<int64_t> gets_{0};
};

}  // namespace

class Throws : public gantry::System {
 public:
  explicit Throws(const gantry::Params& p)
      : throw_in_(p.get("throw_in", "constructor")),
        crash_(p.get("crash", "")),
        crash_after_(p.get("crash_after", int64_t{5})),
        hang_on_rank_(p.get("hang_on_rank", int64_t{-1})),
        slow_rank_(p.get("slow_rank", int64_t{-1})),
        slow_ms_(p.get("slow_ms", int64_t{50})),
        slow_from_(p.get("slow_from", int64_t{0})),
        slow_until_(p.get("slow_until", int64_t{-1})),
        hide_module_(p.get("hide_module", false)),
        log_val_n_(p.get("log_val_n", false)),
        samples_(p.get("samples", int64_t{8})),
        record_(p.get("record", "")),
        model_(4, 1),
        hidden_(4, 1) {
    (void)p.get("lr", 0.1);
    if (throw_in_ == "constructor") throw std::runtime_error("cannot build the model");
    // system.stray_thread: a thread of the plugin's own that runs until the
    // process ends (the runner must not unload the library under it).
    if (p.get("stray_thread", false))
      std::thread([] {
        for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }).detach();
  }
  std::vector<gantry::NamedModule> modules() override {
    maybe("modules");
    return {{"model", model_.ptr()}};
  }
  torch::Tensor forward(const torch::Tensor& x) override {
    maybe("forward");
    return model_(x);
  }
  torch::Tensor sample_input(int64_t n) override {
    maybe("sample_input");
    return torch::randn({n, 4});
  }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    maybe("configure_optimizers");
    std::vector<torch::Tensor> params = model_->parameters();
    if (hide_module_)
      for (const auto& p : hidden_->parameters()) params.push_back(p);
    return {{"sgd", std::make_shared<torch::optim::SGD>(params, 0.01)}};
  }
  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    maybe("training_step");
    if (ctx.rank() == slow_rank_ && steps_ >= slow_from_ && (slow_until_ < 0 || steps_ < slow_until_))
      std::this_thread::sleep_for(std::chrono::milliseconds(slow_ms_));
    if (steps_++ >= crash_after_) {
      if (crash_ == "segv") *static_cast<volatile int*>(nullptr) = 1;
      if (crash_ == "abort") std::abort();
      if (crash_ == "throw42") throw 42;
      if (ctx.rank() == hang_on_rank_)
        for (;;) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!record_.empty()) {
      std::ofstream out(record_ + ".rank" + std::to_string(ctx.rank()), std::ios::app);
      out << ctx.epoch() << ' ' << ctx.global_step();
      const auto ids = batch.input.select(1, 0).to(torch::kInt64);
      for (int64_t k = 0; k < ids.size(0); ++k) out << ' ' << ids[k].item<int64_t>();
      out << '\n';
    }
    // More samples than the default 8: inputs scaled to [0, 1) (SGD diverges on hundreds).
    const auto x = samples_ > 8 ? batch.input / double(samples_) : batch.input;
    const auto y = samples_ > 8 ? batch.target / double(samples_) : batch.target;
    const auto loss = torch::mse_loss(model_(x), y);
    ctx.optimize("sgd", loss);
    ctx.log("loss", loss);
  }
  void validation_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    maybe("validation_step");
    ctx.log("val_loss", torch::mse_loss(model_(batch.input), batch.target));
    if (log_val_n_) {  // samples seen (a sum) and the largest batch (a max): not means
      const auto n = torch::tensor(double(batch.input.size(0)));
      ctx.log("val_n", n, gantry::Reduce::kSum, true);
      ctx.log("val_batch_max", double(batch.input.size(0)), gantry::Reduce::kMax, true);  // a plain number
    }
  }
  void log_samples(gantry::StepContext&) override { maybe("log_samples"); }
  gantry::DataSpec data_spec() const override {
    maybe("data_spec");
    return {};
  }
  gantry::StateDict extra_state() override {
    maybe("extra_state");
    return {{"seen", torch::tensor(1)}};
  }
  void load_extra_state(const gantry::StateDict&) override { maybe("load_extra_state"); }
  std::shared_ptr<gantry::Dataset> train_dataset() override {
    maybe("train_dataset");
    return std::make_shared<Eight>(samples_, throw_in_.rfind("dataset_", 0) == 0 ? throw_in_ : crash_);
  }
  std::shared_ptr<gantry::Dataset> val_dataset() override {
    maybe("val_dataset");
    return std::make_shared<Eight>();
  }
  torch::Tensor render_samples(const torch::Tensor&) override {
    maybe("render_samples");
    return {};
  }
  std::vector<gantry::LrLambda> configure_schedulers() override {
    maybe("configure_schedulers");
    gantry::LrLambda l;
    l.optimizer = "sgd";
    const bool fail = throw_in_ == "lr_factor";
    l.factor = [fail](int64_t t) -> double {
      TORCH_CHECK(!fail || t < 1, "boom in lr_factor");
      return 1.0;
    };
    return {l};
  }
  torch::Tensor features(const torch::Tensor& input) override {
    maybe("features");
    return input.flatten(1);
  }

 private:
  void maybe(const char* hook) const { TORCH_CHECK(throw_in_ != hook, "boom in ", hook); }

  std::string throw_in_, crash_;
  int64_t crash_after_ = 5, hang_on_rank_ = -1, slow_rank_ = -1, slow_ms_ = 50, slow_from_ = 0, slow_until_ = -1,
          steps_ = 0;
  bool hide_module_ = false, log_val_n_ = false;
  int64_t samples_ = 8;
  std::string record_;
  torch::nn::Linear model_, hidden_;
};

GANTRY_PLUGIN(Throws, "throws", "1.0.0", "test: throws from the hook system.throw_in names")
