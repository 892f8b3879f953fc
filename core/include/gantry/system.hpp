// gantry::System, the LightningModule of C++, and the StepContext the trainer
// hands to its training step.
//
// A plugin implements System; the runner implements StepContext. Both are
// abstract classes of virtuals without data members; new virtuals are only
// appended (ABI minor bump, docs/abi.md). Only std:: and torch:: types cross.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
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
  std::string name;                           ///< e.g. "generator"
  std::shared_ptr<torch::nn::Module> module;  ///< shared with the system
};

/// An optimizer by name: what `StepContext::optimize(name, loss)` steps.
struct NamedOptimizer {
  std::string name;                                    ///< e.g. "g"
  std::shared_ptr<torch::optim::Optimizer> optimizer;  ///< over parameters of modules()
};

/// One batch from the data the system asked for.
struct Batch {
  torch::Tensor input;   ///< for "images": float [B, C, H, W] scaled to DataSpec's range
  torch::Tensor target;  ///< for "images": int64 [B] labels (undefined when the data has none)
  // ---- ABI 1.1 (fields only ever appended, each trivially destructible) ----
  uint32_t struct_size = sizeof(Batch);  ///< as the side that made it saw it
};

/// What data the system wants; the trainer checks the data against it before
/// the first step.
struct DataSpec {
  std::string kind = "images";  ///< "images": IDX image files (MNIST format)
  std::vector<int64_t> shape;   ///< expected [C, H, W] of one sample; empty = any
  double low = -1.0;            ///< pixel 0 maps to `low` ...
  double high = 1.0;            ///< ... and pixel 255 to `high`
  // ---- ABI 1.1 (fields only ever appended, each trivially destructible; the
  // runner reads none of them from a plugin built before they existed) ----
  uint32_t struct_size = sizeof(DataSpec);  ///< as the plugin saw it
};

/// How ctx.log reduces a value over the batches of one metrics row (ABI 1.1).
enum class Reduce : uint32_t {
  kMean = 0,  ///< the mean of every value logged in the interval (ctx.log's default)
  kSum = 1,
  kMax = 2,
  kMin = 3,
  kLast = 4,  ///< the value of the row's last batch that logged it
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

  // ---- ABI 1.1: appended (the runner implements them; a plugin built
  // against 1.1 may call them on any runner that loads it) ----

  /// The first half of optimize(): backward into optimizer `optimizer`'s
  /// parameters and the gradient average across ranks. Between this and
  /// step() the gradients are final and may be read or changed (a gradient
  /// penalty's statistics, a custom clip): the hook before the step.
  virtual void backward(const std::string& optimizer, const torch::Tensor& loss) = 0;
  /// The second half: the configured clipping (optimizers.<name>.gradient_clip_val),
  /// the optimizer's step and zero_grad(set_to_none).
  virtual void step(const std::string& optimizer) = 0;
  /// Logs with a reduction over the batches of a metrics row (see Reduce).
  virtual void log(const std::string& name, const torch::Tensor& value, Reduce reduce, bool sync) = 0;
  /// The same for a plain number. Not virtual (no ABI change): it calls the
  /// tensor overload above, which every 1.1 runner implements.
  void log(const std::string& name, double value, Reduce reduce, bool sync) {
    log(name, torch::scalar_tensor(value, torch::kFloat64), reduce, sync);
  }
  /// log_image with the images' range given: `low` maps to black, `high` to white.
  virtual void log_image(const std::string& tag, const torch::Tensor& images, double low, double high) = 0;
  /// A further batch for this same step (WGAN-GP's n_critic critic steps on
  /// fresh data), on the device; nothing when this rank's epoch has no more
  /// (the step should then finish with what it has). global_step() still
  /// counts training_step calls; an epoch has fewer of them.
  virtual std::optional<Batch> next_batch() = 0;

  /// Not virtual (built into the plugin): true on the batches that end a
  /// multiple of `n` (global_step() + 1 divisible by n), i.e. the batches a
  /// metrics row with log_every_n_steps = n is labelled by.
  bool every_n_steps(int64_t n) const { return n > 0 && (global_step() + 1) % n == 0; }

  // ---- ABI 1.3: appended ----

  /// Asks the trainer to end the run after this batch (a plugin's own
  /// stopping rule: a target reached, a loss that diverged). Every rank stops
  /// at the same batch (the ranks agree on it one batch later, as for a
  /// signal), the end's validation, grid and checkpoint are written as at any
  /// end, and the run ends with exit 0 saying `plugin asked to stop: <reason>`
  /// (on other ranks' output: which rank asked). From training_step or the
  /// validation hooks; the first reason stays.
  virtual void request_stop(const std::string& reason) = 0;
};

/// Data a system brings itself (ABI 1.1; System::train_dataset): the runner
/// shards it across ranks, shuffles it (seed + epoch), prepares batches on a
/// worker thread and resumes mid-epoch, exactly as for IDX files. Called from
/// that worker thread, never from two threads at once: a sample must be a
/// function of its index alone (draw synthetic samples from a generator seeded
/// by the index, not from the global one), so that every rank and every
/// resumed run sees the same data.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// Number of samples.
  virtual int64_t size() const = 0;
  /// Sample `index` (0 <= index < size()): `input` without a batch dimension,
  /// `target` a 0-dim tensor, or undefined when the data has none.
  virtual Batch get(int64_t index) const = 0;
  /// The samples at `indices` as one batch (dimension 0 = indices.size()).
  /// The default stacks get(); override it to read a batch at once.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const {
    std::vector<torch::Tensor> inputs, targets;
    for (const int64_t i : indices) {
      Batch b = get(i);
      inputs.push_back(b.input);
      if (b.target.defined()) targets.push_back(b.target);
    }
    Batch out;
    out.input = torch::stack(inputs);
    if (targets.size() == indices.size() && !targets.empty()) out.target = torch::stack(targets);
    return out;
  }
};

/// A learning-rate schedule a system gives one of its optimizers (ABI 1.1;
/// System::configure_schedulers), as PyTorch's LambdaLR: before every batch
/// (every epoch with `per_epoch`) each param group's lr is set to its base lr
/// (the lr it had when configure_optimizers() returned) times factor(t), t
/// counting batches (epochs) from 0. A pure function of t: the same on every
/// rank, and a resumed run continues exactly with nothing to checkpoint.
/// `optimizers.<name>.scheduler` in the config replaces it.
struct LrLambda {
  std::string optimizer;                    ///< a name configure_optimizers() returned
  std::function<double(int64_t t)> factor;  ///< finite and >= 0; called by the runner on its loop thread
  bool per_epoch = false;                   ///< t counts epochs instead of batches
  uint32_t struct_size = sizeof(LrLambda);  ///< as the plugin saw it
};

/// Tensors by name: a plugin's own state besides modules and optimizers.
using StateDict = std::vector<std::pair<std::string, torch::Tensor>>;

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

  // ---- ABI 1.1: appended; the runner calls them only on plugins built
  // with minor >= 1 (a 1.0 plugin's vtable ends above) ----

  /// State outside modules() and optimizers (counters, a schedule of its
  /// own, an EMA kept in plain members), saved in every checkpoint; names
  /// are the plugin's. Called on rank 0 at each checkpoint (replicas agree).
  virtual StateDict extra_state() { return {}; }
  /// Restores what extra_state() returned, on resume (every rank; after the
  /// modules and optimizers are restored). Absent names are absent.
  virtual void load_extra_state(const StateDict& state) { (void)state; }
  /// The system's own training data, or null for the runner's (data.path:
  /// IDX files, DataSpec kind "images"). With its own data the runner reads
  /// no files and does not check DataSpec's kind or shape.
  virtual std::shared_ptr<Dataset> train_dataset() { return nullptr; }
  /// Its own validation split (trainer.val_every_n_epochs), or null.
  virtual std::shared_ptr<Dataset> val_dataset() { return nullptr; }
  /// How samples are shown when forward() does not return images (`gantry
  /// sample`): images [N, C, H, W] in [0, 1] (e.g. 2-D points drawn as a
  /// scatter plot, N = 1), or an undefined tensor: forward()'s output is
  /// images in the data's range already.
  virtual torch::Tensor render_samples(const torch::Tensor& samples) {
    (void)samples;
    return {};
  }
  /// Learning-rate schedules of its own, per optimizer (see LrLambda). Called
  /// once, after configure_optimizers().
  virtual std::vector<LrLambda> configure_schedulers() { return {}; }

  // ---- ABI 1.2: appended; called only on plugins built with minor >= 2 ----

  /// An embedding of data samples for sample-quality metrics (the Frechet
  /// distance of `metrics.quality_classifier`): `input` [N, C, H, W] in
  /// DataSpec's range -> float [N, D], a classifier's penultimate layer; its
  /// forward() then gives the class logits [N, classes]. Called with the
  /// modules in eval mode, without grad. An undefined tensor: no embedding.
  virtual torch::Tensor features(const torch::Tensor& input) {
    (void)input;
    return {};
  }

  // ---- ABI 1.3: appended; called only on plugins built with minor >= 3 ----

  /// Before a validation pass (modules in eval mode, without grad): reset
  /// what on_validation_end sums up. Lightning's on_validation_epoch_start.
  virtual void on_validation_start(StepContext& ctx) { (void)ctx; }
  /// After the pass's last validation_step on this rank: values logged here
  /// (an accuracy over the whole shard, say) join the validation row, reduced
  /// over the ranks as ctx.log asks (each rank's value counts once).
  /// Lightning's on_validation_epoch_end.
  virtual void on_validation_end(StepContext& ctx) { (void)ctx; }
  /// A conditional system's inputs for forward() that ask for given classes:
  /// `labels` int64 [n] -> n inputs (a cGAN: noise drawn from the global
  /// generator and the labels, packed as its forward() takes them). `gantry
  /// sample --labels 0,1,2` draws with it. An undefined tensor (the default):
  /// the system is not conditional (`--labels` is refused naming it).
  virtual torch::Tensor conditional_input(const torch::Tensor& labels) {
    (void)labels;
    return {};
  }
};

}  // namespace gantry
