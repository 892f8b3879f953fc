// The one door into a plugin's System: the engine calls a gantry::System only
// through PluginSystem, which
//   - knows which hooks the plugin's ABI minor has, and gives the defaults of
//     an older minor itself (a 1.0 plugin has no datasets, no extra state, no
//     schedules, no render_samples; below 1.2 there are no features, below
//     1.3 no validation start/end hooks), so no
//     caller ever reads `abi_minor` (docs/abi.md);
//   - wraps every exception thrown by plugin code once, in one line of one
//     shape: `plugin gan: training_step failed at step 120: <cause>` (hooks
//     called outside the loop: `plugin gan: modules failed: <cause>`),
//     LibTorch's C++ backtrace stripped. gantry's own errors (a StepContext
//     call the plugin made wrongly, a Params getter) pass through as they are.
// Models: PJRT's C API client (every minor-version gate inside the one
// adapter) and Lightning's trainer/call.py (every call into user code through
// one function that names the hook).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "gantry/system.hpp"
#include "plugin/plugin_loader.hpp"

namespace gantry {

/// One hook's calls through PluginSystem and their wall time (on a GPU: the
/// time to queue its work, unless the hook waits for the device).
struct HookTime {
  int64_t calls = 0;
  double seconds = 0;
};

class GANTRY_CORE_EXPORT PluginSystem {
 public:
  /// Builds the system with the plugin's factory (its constructor's errors:
  /// `plugin P: constructor failed: ...`; a Params getter's stay ConfigErrors).
  /// Keeps the plugin's library loaded while it lives.
  PluginSystem(std::shared_ptr<Plugin> plugin, const Params& params);

  const PluginManifest& manifest() const { return plugin_->manifest(); }
  const std::string& name() const { return plugin_->manifest().name; }

  // ---- ABI 1.0 ----
  std::vector<NamedModule> modules();
  /// `step`: the training step it is called at (-1: outside training).
  torch::Tensor forward(const torch::Tensor& input, int64_t step = -1);
  torch::Tensor sample_input(int64_t n, int64_t step = -1);
  std::vector<NamedOptimizer> configure_optimizers();
  void training_step(const Batch& batch, StepContext& ctx, int64_t step);
  void validation_step(const Batch& batch, StepContext& ctx, int64_t step);
  void log_samples(StepContext& ctx, int64_t step);
  /// The fields appended in 1.1 are marked absent (struct_size) for a 1.0
  /// plugin: what the runner's larger struct holds there is not the plugin's.
  DataSpec data_spec();

  // ---- ABI 1.1 (a 1.0 plugin: the defaults named) ----
  StateDict extra_state(int64_t step);                          ///< 1.0: none
  void load_extra_state(const StateDict& state, int64_t step);  ///< 1.0: nothing to load
  std::shared_ptr<Dataset> train_dataset();                     ///< 1.0: null (the runner's data)
  std::shared_ptr<Dataset> val_dataset();                       ///< 1.0: null
  torch::Tensor render_samples(const torch::Tensor& samples);   ///< 1.0: undefined (samples are images)
  std::vector<LrLambda> configure_schedulers();                 ///< 1.0: none

  // ---- ABI 1.2 ----
  /// Throws a PluginError naming the plugin's SDK and the one that has
  /// features() when the plugin was built before 1.2.
  void check_features() const;
  /// The plugin's embedding (check_features() first).
  torch::Tensor features(const torch::Tensor& input);

  // ---- ABI 1.3 (below: nothing to call) ----
  void on_validation_start(StepContext& ctx, int64_t step);
  void on_validation_end(StepContext& ctx, int64_t step);
  /// Undefined below 1.3 (not conditional).
  torch::Tensor conditional_input(const torch::Tensor& labels);

  /// Every hook called so far, by name, with its calls and time.
  const std::map<std::string, HookTime>& hook_times() const { return times_; }

 private:
  template <class F>
  auto call(const char* hook, int64_t step, F&& f) -> decltype(f());
  uint32_t minor() const { return plugin_->manifest().abi_minor; }

  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<System> system_;
  std::map<std::string, HookTime> times_;
};

}  // namespace gantry
