// The system as the trainer holds it: its modules on the accelerator's device
// (weights laid out for fast products), its optimizers with what stepping
// them needs (slots: gradient sync, fused Adam, step-in-backward), the step
// context the plugin sees; its calls into the plugin go through the
// Experiment's PluginSystem (plugin/plugin_system.hpp). Built once per fit; restores
// trainer.resume and gives every rank rank 0's parameters.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#include "train/accelerator.hpp"
#include "checkpoint/file.hpp"
#include "train/step_context.hpp"
#include "train/experiment.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT Model {
 public:
  /// Where ctx.log_image goes (set by whoever writes images: rank 0's outputs).
  using ImageSink =
      std::function<void(const std::string& tag, int64_t step, const torch::Tensor& images, double low, double high)>;

  Model(Experiment exp, Accelerator& accel);
  ~Model();

  const ExperimentConfig& cfg() const { return exp_.config; }
  /// A resume at another world size that keeps the global batch
  /// (data.keep_batch global, train/resume.hpp): this run's per-rank batch,
  /// before the fit starts (its checkpoints record it).
  void set_batch_size(int64_t per_rank) { exp_.config.data.batch_size = per_rank; }
  const Experiment& experiment() const { return exp_; }
  const std::string& plugin_name() const { return exp_.system->name(); }
  /// The plugin's system, behind its one door.
  PluginSystem& system() const { return *exp_.system; }
  const DataSpec& spec() const { return spec_; }
  /// Where training stands after trainer.resume (zeros when fresh).
  const TrainState& resumed() const { return resumed_; }
  /// The resume checkpoint's metadata (its config), from the same read.
  const CheckpointMeta& resumed_meta() const { return resumed_meta_; }
  /// Each optimizer's param-group lrs as configure_optimizers() built them
  /// from this config (before a resume loaded the checkpoint's).
  const std::vector<double>& built_lrs(const std::string& optimizer) const { return built_lrs_.at(optimizer); }

  const std::vector<NamedModule>& modules() const { return modules_; }
  const std::vector<NamedOptimizer>& optimizers() const { return optimizers_; }
  std::vector<torch::Tensor> parameters() const;
  /// Every parameter by name, "<module>.<parameter>".
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  /// trainer.log_histograms_every_n_steps: copy each optimizer's averaged
  /// gradients at its next step (before clipping), or stop (and drop them).
  void keep_gradients(bool on);
  /// The copies, by parameter name, of the optimizers that stepped since keep_gradients(true).
  std::vector<std::pair<std::string, torch::Tensor>> kept_gradients() const;
  std::vector<torch::Tensor> buffers() const;

  void set_image_sink(ImageSink sink) { image_sink_ = std::move(sink); }
  /// trainer.profiler: the step context times backward, the all-reduce's wait and the step.
  void set_profile(Profile* p);

  /// The plugin's extra_state() at `step` (empty for a 1.0 plugin), under the
  /// trainer_state keys it is saved as ("plugin.<name>").
  std::map<std::string, torch::Tensor> plugin_state(int64_t step);
  static constexpr const char* kPluginStatePrefix = "plugin.";
  /// The gradients of optimizers between two accumulated steps
  /// (trainer.accumulate_grad_batches), as trainer_state entries
  /// "accumulate.<name>.micro" and "accumulate.<name>.<i>"; averaged over
  /// the ranks first (a collective: call it on every rank).
  std::map<std::string, torch::Tensor> accumulation_state();
  /// A resume's accumulation_state() back into the slots (the accumulation callback's load).
  void restore_accumulation(const std::map<std::string, torch::Tensor>& saved);
  static constexpr const char* kAccumulationPrefix = "accumulate.";

  /// Every module in eval mode and no grad while it lives (then train mode again).
  class EvalScope {
   public:
    explicit EvalScope(Model& model) : model_(model) { model_.set_train(false); }
    ~EvalScope() { model_.set_train(true); }
    EvalScope(const EvalScope&) = delete;
    EvalScope& operator=(const EvalScope&) = delete;

   private:
    Model& model_;
    torch::NoGradGuard no_grad_;
  };

  /// The plugin's hooks, each with the step context begun at `state`; each
  /// returns the values the hook logged. validation_step: inside an EvalScope.
  /// `more`: what ctx.next_batch() draws from during this step. With
  /// trainer.cuda_graphs, training_step is captured once and replayed.
  const std::vector<LoggedValue>& training_step(const Batch& batch, const TrainState& state,
                                                std::function<std::optional<Batch>()> more = nullptr);
  const std::vector<LoggedValue>& validation_step(const Batch& batch, const TrainState& state);
  /// The plugin's on_validation_start (`start`) or on_validation_end (ABI
  /// 1.3), inside the pass's EvalScope; returns what it logged.
  const std::vector<LoggedValue>& validation_hook(bool start, const TrainState& state);
  /// What the plugin's ctx.request_stop asked since the last call ("" if nothing).
  std::string take_stop_request();
  /// log_samples in its own EvalScope.
  const std::vector<LoggedValue>& log_samples(const TrainState& state);

 private:
  void build_modules();
  void build_optimizers();
  void check_parameters_owned() const;
  void set_train(bool train);
  void eager_step(const Batch& batch, const TrainState& state);
  // trainer.cuda_graphs (docs/cuda.md): why this run cannot capture its step ("" if it can).
  std::string graphs_unavailable() const;
  const std::vector<LoggedValue>& graphed_step(const Batch& batch, const TrainState& state);
  void graphs_off(const std::string& why);

  Experiment exp_;
  Accelerator& accel_;
  std::vector<NamedModule> modules_;
  std::vector<NamedOptimizer> optimizers_;
  std::vector<OptimizerSlot> slots_;
  DataSpec spec_;
  TrainState resumed_;
  CheckpointMeta resumed_meta_;
  std::map<std::string, std::vector<double>> built_lrs_;
  ImageSink image_sink_;
  std::unique_ptr<StepContextImpl> ctx_;
  bool bf16_ = false;  // trainer.precision=bf16-mixed: the hooks run under autocast
  struct Graphed;
  std::unique_ptr<Graphed> graphed_;  // trainer.cuda_graphs while the step is (to be) captured
};

}  // namespace gantry
