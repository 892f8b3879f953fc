#include "plugin/plugin_system.hpp"

#include <chrono>

#include <cstddef>

#include "gantry/errors.hpp"
#include "runtime/crash.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

namespace {

// Calls plugin code `f` under the one door's rules: a crash in it names the
// plugin, hook and step (CrashScope, on this thread), a throw becomes the one
// line, gantry's own errors pass through. `t` >= 0: the hook's line says
// "at t=<t>" (an lr factor's argument).
template <class F>
auto guarded(const std::string& plugin, const char* hook, int64_t step, F&& f, int64_t t = -1) -> decltype(f()) {
  const CrashScope scope(plugin.c_str(), hook, step);
  auto named = [&] { return t >= 0 ? std::string(hook) + " at t=" + std::to_string(t) : std::string(hook); };
  try {
    return f();
  } catch (const Error&) {
    throw;  // gantry's own (a StepContext call made wrongly, a Params getter): already one line
  } catch (const std::exception& e) {
    throw PluginError(plugin_failure(plugin, named(), step, e));
  } catch (...) {
    // `throw 42`: not a std::exception, so no message; the same line shape.
    throw PluginError("plugin " + plugin + ": " + named() + " failed" +
                      (step >= 0 ? " at step " + std::to_string(step) : "") +
                      ": it threw something that is not a std::exception (no message)");
  }
}

// A plugin's own dataset (SDK 1.1), which the loader calls on its own thread:
// behind the door like every hook ("plugin P: train_dataset get_batch failed:
// ..."), and its library loaded while the dataset lives.
class PluginDataset final : public Dataset {
 public:
  PluginDataset(std::shared_ptr<Plugin> plugin, std::shared_ptr<Dataset> inner, const std::string& which)
      : plugin_(std::move(plugin)),
        inner_(std::move(inner)),
        size_hook_(which + " size"),
        get_hook_(which + " get"),
        batch_hook_(which + " get_batch") {}
  ~PluginDataset() override { inner_.reset(); }  // the plugin's object before its library (plugin_)

  int64_t size() const override {
    return guarded(name(), size_hook_.c_str(), -1, [&] { return inner_->size(); });
  }
  Batch get(int64_t index) const override {
    return guarded(name(), get_hook_.c_str(), -1, [&] { return inner_->get(index); });
  }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    return guarded(name(), batch_hook_.c_str(), -1, [&] { return inner_->get_batch(indices); });
  }

 private:
  const std::string& name() const { return plugin_->manifest().name; }

  std::shared_ptr<Plugin> plugin_;
  std::shared_ptr<Dataset> inner_;
  std::string size_hook_, get_hook_, batch_hook_;
};

}  // namespace

template <class F>
auto PluginSystem::call(const char* hook, int64_t step, F&& f) -> decltype(f()) {
  struct Timed {  // the hook's calls and time (hook_times(): fast_dev_run's report)
    HookTime& into;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timed() {
      ++into.calls;
      into.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } timed{times_[hook]};
  return guarded(name(), hook, step, std::forward<F>(f));
}

PluginSystem::PluginSystem(std::shared_ptr<Plugin> plugin, const Params& params)
    : plugin_(std::move(plugin)), system_(plugin_->create(params)) {}

std::vector<NamedModule> PluginSystem::modules() {
  return call("modules", -1, [&] { return system_->modules(); });
}

torch::Tensor PluginSystem::forward(const torch::Tensor& input, int64_t step) {
  return call("forward", step, [&] { return system_->forward(input); });
}

torch::Tensor PluginSystem::sample_input(int64_t n, int64_t step) {
  return call("sample_input", step, [&] { return system_->sample_input(n); });
}

std::vector<NamedOptimizer> PluginSystem::configure_optimizers() {
  return call("configure_optimizers", -1, [&] { return system_->configure_optimizers(); });
}

void PluginSystem::training_step(const Batch& batch, StepContext& ctx, int64_t step) {
  call("training_step", step, [&] { system_->training_step(batch, ctx); });
}

void PluginSystem::validation_step(const Batch& batch, StepContext& ctx, int64_t step) {
  call("validation_step", step, [&] { system_->validation_step(batch, ctx); });
}

void PluginSystem::log_samples(StepContext& ctx, int64_t step) {
  call("log_samples", step, [&] { system_->log_samples(ctx); });
}

DataSpec PluginSystem::data_spec() {
  DataSpec spec = call("data_spec", -1, [&] { return system_->data_spec(); });
  if (minor() < 1) spec.struct_size = static_cast<uint32_t>(offsetof(DataSpec, struct_size));
  return spec;
}

StateDict PluginSystem::extra_state(int64_t step) {
  if (minor() < 1) return {};
  return call("extra_state", step, [&] { return system_->extra_state(); });
}

void PluginSystem::load_extra_state(const StateDict& state, int64_t step) {
  if (minor() < 1) return;
  call("load_extra_state", step, [&] { system_->load_extra_state(state); });
}

std::shared_ptr<Dataset> PluginSystem::train_dataset() {
  if (minor() < 1) return nullptr;
  std::shared_ptr<Dataset> own = call("train_dataset", -1, [&] { return system_->train_dataset(); });
  return own ? std::make_shared<PluginDataset>(plugin_, std::move(own), "train_dataset") : nullptr;
}

std::shared_ptr<Dataset> PluginSystem::val_dataset() {
  if (minor() < 1) return nullptr;
  std::shared_ptr<Dataset> own = call("val_dataset", -1, [&] { return system_->val_dataset(); });
  return own ? std::make_shared<PluginDataset>(plugin_, std::move(own), "val_dataset") : nullptr;
}

torch::Tensor PluginSystem::render_samples(const torch::Tensor& samples) {
  if (minor() < 1) return {};
  return call("render_samples", -1, [&] { return system_->render_samples(samples); });
}

std::vector<LrLambda> PluginSystem::configure_schedulers() {
  if (minor() < 1) return {};
  std::vector<LrLambda> given = call("configure_schedulers", -1, [&] { return system_->configure_schedulers(); });
  for (auto& l : given) {
    if (!l.factor) continue;  // the caller refuses it, naming the optimizer
    // The factor is plugin code too, called before every batch: wrapped here.
    l.factor = [plugin = name(), hook = "the lr factor of optimizer " + l.optimizer,
                factor = std::move(l.factor)](int64_t t) {
      return guarded(
          plugin, hook.c_str(), -1, [&] { return factor(t); }, t);
    };
  }
  return given;
}

void PluginSystem::check_features() const {
  if (minor() < 2)
    throw PluginError("plugin " + name() + " is built against SDK " + std::to_string(manifest().abi_major) + "." +
                      std::to_string(minor()) + ", which has no features(); a feature model needs SDK 1.2 " +
                      "(plugins/classifier)");
}

void PluginSystem::on_validation_start(StepContext& ctx, int64_t step) {
  if (minor() < 3) return;
  call("on_validation_start", step, [&] { system_->on_validation_start(ctx); });
}

void PluginSystem::on_validation_end(StepContext& ctx, int64_t step) {
  if (minor() < 3) return;
  call("on_validation_end", step, [&] { system_->on_validation_end(ctx); });
}

torch::Tensor PluginSystem::conditional_input(const torch::Tensor& labels) {
  if (minor() < 3) return {};
  return call("conditional_input", -1, [&] { return system_->conditional_input(labels); });
}

torch::Tensor PluginSystem::features(const torch::Tensor& input) {
  check_features();
  return call("features", -1, [&] { return system_->features(input); });
}

}  // namespace gantry
