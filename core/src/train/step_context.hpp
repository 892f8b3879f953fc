// What a plugin's training_step sees: StepContextImpl (ctx.optimize, ctx.log,
// ctx.log_image) over the trainer's optimizer slots. Internal to gantry::core:
// the trainer owns the slots and the context; plugins see only StepContext.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "distributed/distributed.hpp"
#include "gantry/core_export.hpp"
#include "optim/fused_adam.hpp"
#include "train/profile.hpp"
#include "gantry/system.hpp"

namespace gantry {

/// One optimizer of configure_optimizers(), with what the trainer needs to step it.
struct OptimizerSlot {
  std::string name;
  std::shared_ptr<torch::optim::Optimizer> optimizer;
  std::vector<torch::Tensor> params;            // those with requires_grad: backward's inputs
  std::unique_ptr<GradSync> sync;               // gradient all-reduce; null in a world of one
  bool fused = false;                           // an Adam stepped by fused_adam_step
  std::unique_ptr<AdamInBackward> in_backward;  // fused and a world of one: stepped during backward
  std::unique_ptr<DeviceAdam> device_adam;      // an Adam on a GPU: ATen's fused kernel, capturable
  double clip = 0;                              // optimizers.<name>.gradient_clip_val (0: none), after the DDP average
  bool clip_by_norm = true;                     // norm: total 2-norm; else each element to [-clip, clip]
  bool log_norm = false;                        // trainer.log_grad_norm: log grad_norm_<name> before clipping
  int64_t accumulate = 1;           // optimizers.<name>.accumulate_grad_batches: backward calls summed per step
  int64_t micro = 0;                // backward calls summed in the gradients since the last step
  bool keep_grads = false;          // trainer.log_histograms_every_n_steps: copy the next step's gradients
  std::vector<torch::Tensor> kept;  // those copies (averaged, before clipping), by params' order
};

/// A value the plugin logged this step (ctx.log).
struct LoggedValue {
  std::string name;
  torch::Tensor value;
  bool sync;
  Reduce reduce = Reduce::kMean;
};

/// The StepContext of every training_step; the trainer calls begin() before each.
class GANTRY_CORE_EXPORT StepContextImpl final : public StepContext {
 public:
  /// Where ctx.log_image goes (the trainer writes the grid and streams it);
  /// low > high: the data's range (DataSpec).
  using ImageSink = std::function<void(const std::string&, const torch::Tensor&, double low, double high)>;

  StepContextImpl(std::vector<OptimizerSlot>& slots, torch::Device device, int rank, int world, ImageSink sink)
      : slots_(slots), device_(device), rank_(rank), world_(world), image_sink_(std::move(sink)) {}

  void begin(int64_t step, int64_t epoch) {
    step_ = step;
    epoch_ = epoch;
    values_.clear();
  }
  const std::vector<LoggedValue>& values() const { return values_; }

  /// Backward into the named optimizer's parameters only, the gradient
  /// all-reduce (world > 1), the step, zero_grad(set_to_none). With
  /// accumulation (slot.accumulate = k > 1): each loss divided by k, its
  /// gradients summed; the all-reduce and the step only on the k-th call.
  void optimize(const std::string& name, const torch::Tensor& loss) override;
  void log(const std::string& name, const torch::Tensor& value, bool sync) override;
  void log(const std::string& name, double value, bool sync) override;
  void log(const std::string& name, const torch::Tensor& value, Reduce reduce, bool sync) override;

  void log_image(const std::string& tag, const torch::Tensor& images) override { image_sink_(tag, images, 1, 0); }
  void log_image(const std::string& tag, const torch::Tensor& images, double low, double high) override;

  /// optimize() in two halves (ABI 1.1): backward + average, then clip + step.
  void backward(const std::string& name, const torch::Tensor& loss) override;
  void step(const std::string& name) override;
  std::optional<Batch> next_batch() override {
    TORCH_CHECK(batch_source_, "ctx.next_batch() is for training_step (no batches to draw here)");
    host_reads_ |= kReadBatch;
    return batch_source_();
  }
  /// trainer.precision=bf16-mixed: backward runs with autocast paused, and a
  /// step drops autocast's cached bf16 weights.
  void set_bf16(bool on) { bf16_ = on; }
  /// trainer.profiler: backward, the all-reduce's wait and the step are timed (null: off).
  void set_profile(Profile* p) { profile_ = p; }
  /// What next_batch() draws from (the loop's loader); null outside training_step.
  void set_batch_source(std::function<std::optional<Batch>()> source) { batch_source_ = std::move(source); }

  int64_t global_step() const override {
    host_reads_ |= kReadStep;
    return step_;
  }
  int64_t epoch() const override {
    host_reads_ |= kReadEpoch;
    return epoch_;
  }
  /// What the plugin read from the host since the last call (what a CUDA
  /// graph of its step would freeze at capture): "ctx.global_step()", ..., or "".
  std::string take_host_reads();
  /// ctx.request_stop (ABI 1.3): the first reason since the last take stays.
  void request_stop(const std::string& reason) override {
    if (stop_request_.empty()) stop_request_ = reason.empty() ? "(no reason given)" : reason;
  }
  std::string take_stop_request() { return std::exchange(stop_request_, std::string()); }
  int rank() const override { return rank_; }
  int world_size() const override { return world_; }
  torch::Device device() const override { return device_; }

 private:
  OptimizerSlot& slot(const std::string& name, const char* call);
  void backward(OptimizerSlot& slot, const torch::Tensor& loss, const char* call);
  void step(OptimizerSlot& slot);

  std::vector<OptimizerSlot>& slots_;
  torch::Device device_;
  int rank_, world_;
  ImageSink image_sink_;
  std::function<std::optional<Batch>()> batch_source_;
  int64_t step_ = 0, epoch_ = 0;
  bool bf16_ = false;
  Profile* profile_ = nullptr;
  std::vector<LoggedValue> values_;
  std::string stop_request_;
  enum : unsigned { kReadStep = 1, kReadEpoch = 2, kReadBatch = 4 };
  mutable unsigned host_reads_ = 0;
};

}  // namespace gantry
