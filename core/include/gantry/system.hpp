// gantry::System, the LightningModule of C++, and the StepContext the trainer
// hands to its training step.
//
// A plugin implements System; the runner implements StepContext. Both are
// abstract classes of virtuals without data members; new virtuals are only
// appended (ABI minor bump, docs/abi.md). Only std:: and torch:: types cross.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include "gantry/params.hpp"

namespace gantry {

/// A module the system owns, by name. The name prefixes its parameters in
/// checkpoints (`generator.model.0.weight`), so keep it stable.
struct NamedModule {
  std::string name;                            ///< e.g. "generator"
  std::shared_ptr<torch::nn::Module> module;   ///< shared with the system
};

/// An optimizer by name: what `StepContext::optimize(name, loss)` steps.
struct NamedOptimizer {
  std::string name;                                  ///< e.g. "g"
  std::shared_ptr<torch::optim::Optimizer> optimizer;  ///< over parameters of modules()
};

/// One batch from the data the system asked for.
struct Batch {
  torch::Tensor input;   ///< for "images": float [B, C, H, W] scaled to DataSpec's range
  torch::Tensor target;  ///< for "images": int64 [B] labels (undefined when the data has none)
};

/// What data the system wants; the trainer checks the data against it before
/// the first step.
struct DataSpec {
  std::string kind = "images";        ///< "images": IDX image files (MNIST format)
  std::vector<int64_t> shape;         ///< expected [C, H, W] of one sample; empty = any
  double low = -1.0;                  ///< pixel 0 maps to `low` ...
  double high = 1.0;                  ///< ... and pixel 255 to `high`
};

/// What the trainer gives a training step. Owned by the trainer; valid only
/// during the call it is passed to.
class StepContext {
 public:
  virtual ~StepContext() = default;

  /// Manual optimization, as Lightning 2.x does for GANs: backpropagates `loss`
  /// into the parameters of optimizer `optimizer` only (no gradient is computed
  /// for the other optimizers' parameters), synchronizes those gradients across
  /// ranks, steps the optimizer and zeroes its gradients. Throws when no
  /// optimizer has that name.
  virtual void optimize(const std::string& optimizer, const torch::Tensor& loss) = 0;
  /// Logs a scalar (a 0-dim tensor, e.g. a loss) under `name` for this step:
  /// progress bar (the last value), metrics.csv, the stream and TensorBoard
  /// (a row every trainer.log_every_n_steps batches holding each value's
  /// mean over the batches since the previous row, so a value logged on any
  /// step is kept; also from log_samples). `sync`: average across ranks
  /// before logging. A NaN or Inf value stops the run, naming it.
  virtual void log(const std::string& name, const torch::Tensor& value, bool sync = false) = 0;
  /// Logs a plain number under `name` for this step (see the tensor overload).
  virtual void log(const std::string& name, double value, bool sync = false) = 0;
  /// Logs images [N, C, H, W] in the data's range as one grid (8 per row)
  /// under `tag` for this step: written as images/<tag>_<step>.png.
  virtual void log_image(const std::string& tag, const torch::Tensor& images) = 0;
  /// Batches trained so far (not optimizer steps): 0 during the first batch.
  /// Rows, images and checkpoints are labelled with the count after their
  /// batch: the row "step 50" holds the batches where this was 40..49.
  virtual int64_t global_step() const = 0;
  /// The epoch, from 0.
  virtual int64_t epoch() const = 0;
  /// This process's rank, from 0.
  virtual int rank() const = 0;
  /// Number of ranks training together.
  virtual int world_size() const = 0;
  /// The device the modules and batches live on.
  virtual torch::Device device() const = 0;
};

/// A trainable system: models, optimizers and the training step. Built by the
/// plugin's factory from `Params`; the trainer moves `modules()` to the device
/// and then calls `configure_optimizers()` once.
class System {
 public:
  virtual ~System() = default;

  /// Every module whose parameters and buffers are trained, synchronized and
  /// checkpointed, by name. Called after construction; the list must not change.
  virtual std::vector<NamedModule> modules() = 0;
  /// Inference: for the GAN, noise [N, latent] -> images [N, C, H, W]. Used by
  /// `gantry sample` with the modules in eval mode, without grad.
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  /// `n` inputs for `forward` drawn from the global generator (the GAN: noise).
  virtual torch::Tensor sample_input(int64_t n) = 0;
  /// The optimizers, by name, over parameters of modules(). Called once, after
  /// the modules are on their device.
  virtual std::vector<NamedOptimizer> configure_optimizers() = 0;
  /// One batch of training: compute losses, call ctx.optimize(), ctx.log().
  virtual void training_step(const Batch& batch, StepContext& ctx) = 0;
  /// One batch of validation data, modules in eval mode and no grad. Optional.
  virtual void validation_step(const Batch& batch, StepContext& ctx) {
    (void)batch;
    (void)ctx;
  }
  /// Called every `trainer.image_every_n_steps` (and before the first and after
  /// the last step) with modules in eval mode and no grad: log sample images
  /// with ctx.log_image. Optional.
  virtual void log_samples(StepContext& ctx) { (void)ctx; }
  /// The data this system trains on.
  virtual DataSpec data_spec() const { return {}; }
};

}  // namespace gantry
