// A test plugin for trainer.cuda_graphs' failure path (tests/cuda_test.cpp):
// a linear regression on data of its own, noise drawn on the device every
// step, Adam, and on request what a CUDA graph cannot capture.
//   system.samples   size of its dataset (batches of data.batch_size; a
//                    size that is no multiple makes each epoch's last batch short)
//   system.features  inputs per sample (4096: a batch of 64 is 1 MiB, so a
//                    batch the allocator never gets back shows in its stats)
//   system.read      none | item: `.item()` of the loss every step (a NaN
//                    guard a user might write: a host read of a device value)
//                    | own_generator: the noise drawn from a CUDA generator of
//                    the plugin's own, which a capture on torch < 2.13 refuses
// It logs the CUDA caching allocator's reserved bytes (MiB), so a test sees
// whether memory grows step after step.
#include <torch/torch.h>

#include <cmath>
#include <stdexcept>

#include <gantry/gantry.hpp>

#include <ATen/CPUGeneratorImpl.h>
#if GANTRY_WITH_CUDA
#include <ATen/cuda/CUDAGeneratorImpl.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace {

// Sample i: x ~ N(0, 1) from a generator seeded by i, y = sum(x) / 4.
class Points : public gantry::Dataset {
 public:
  Points(int64_t n, int64_t features) : n_(n), features_(features) {}
  int64_t size() const override { return n_; }
  gantry::Batch get(int64_t i) const override {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(i) + 1);
    gantry::Batch b;
    b.input = torch::randn({features_}, gen, torch::kFloat32);
    b.target = (b.input.sum() / 4).reshape({1});
    return b;
  }

 private:
  int64_t n_, features_;
};

}  // namespace

class GraphProbe : public gantry::System {
 public:
  explicit GraphProbe(const gantry::Params& p)
      : lr_(p.get("lr", 0.001)),
        samples_(p.get("samples", int64_t{4096})),
        features_(p.get("features", int64_t{16})),
        read_(p.get("read", "none")),
        model_(features_, 1) {
    if (read_ != "none" && read_ != "item" && read_ != "own_generator")
      throw std::invalid_argument("system.read must be none, item or own_generator, got '" + read_ + "'");
  }

  std::vector<gantry::NamedModule> modules() override { return {{"model", model_.ptr()}}; }
  torch::Tensor forward(const torch::Tensor& x) override { return model_(x); }
  torch::Tensor sample_input(int64_t n) override { return torch::randn({n, features_}); }
  std::vector<gantry::NamedOptimizer> configure_optimizers() override {
    return {{"adam", std::make_shared<torch::optim::Adam>(model_->parameters(), torch::optim::AdamOptions(lr_))}};
  }
  std::shared_ptr<gantry::Dataset> train_dataset() override { return std::make_shared<Points>(samples_, features_); }

  void training_step(const gantry::Batch& batch, gantry::StepContext& ctx) override {
    torch::Tensor noise;
#if GANTRY_WITH_CUDA
    if (read_ == "own_generator" && ctx.device().is_cuda()) {
      if (!own_.defined()) own_ = at::cuda::detail::createCUDAGenerator(ctx.device().index());
      noise = at::randn(batch.input.sizes(), own_, batch.input.options());
    }
#endif
    if (!noise.defined()) noise = torch::randn_like(batch.input);
    const auto loss = torch::mse_loss(forward(batch.input + 0.01 * noise), batch.target);
    if (read_ == "item" && !std::isfinite(loss.item<float>())) throw std::runtime_error("the loss is not finite");
    ctx.optimize("adam", loss);
    ctx.log("loss", loss);
#if GANTRY_WITH_CUDA
    if (ctx.device().is_cuda()) {  // read eagerly each step; under a graph it would be the capture's
      const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(ctx.device().index());
      const auto mib = [&](const c10::CachingAllocator::Stat& s) {
        return torch::full({}, double(s.current) / (1 << 20),
                           torch::TensorOptions(torch::kFloat64).device(ctx.device()));
      };
      ctx.log("allocated_mib", mib(stats.allocated_bytes[0]), gantry::Reduce::kMax, false);
      ctx.log("reserved_mib", mib(stats.reserved_bytes[0]), gantry::Reduce::kMax, false);
    }
#endif
  }

 private:
  double lr_;
  int64_t samples_, features_;
  std::string read_;
  torch::nn::Linear model_;
  at::Generator own_;
};

GANTRY_PLUGIN(GraphProbe, "graph_probe", "1.0.0", "test: what a CUDA graph cannot capture")
