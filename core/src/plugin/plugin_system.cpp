#include "plugin/plugin_system.hpp"

#include <chrono>

#include <cstddef>

#include "gantry/errors.hpp"
#include "runtime/crash.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

std::string plugin_failure(const std::string& plugin, const std::string& hook, int64_t step, const std::exception& e) {
  std::string cause = error_text(e);  // a c10::Error's message without its backtrace
  // A LibTorch error the plugin caught and rethrew as another type keeps its
  // backtrace in what(): cut it there.
  if (const size_t at = cause.find("\nException raised from "); at != std::string::npos) cause.resize(at);
  return "plugin " + plugin + ": " + hook + " failed" + (step >= 0 ? " at step " + std::to_string(step) : "") + ": " +
         cause;
}

template <class F>
auto PluginSystem::call(const char* hook, int64_t step, F&& f) -> decltype(f()) {
  const CrashScope scope(name().c_str(), hook, step);  // a crash in here names the plugin, hook and step
  struct Timed {  // the hook's calls and time (hook_times(): fast_dev_run's report)
    HookTime& into;
    std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
    ~Timed() {
      ++into.calls;
      into.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
  } timed{times_[hook]};
  try {
    return f();
  } catch (const Error&) {
    throw;  // gantry's own (a StepContext call made wrongly, a Params getter): already one line
  } catch (const std::exception& e) {
    throw PluginError(plugin_failure(name(), hook, step, e));
  } catch (...) {
    // `throw 42`: not a std::exception, so no message; the same line shape.
    throw PluginError("plugin " + name() + ": " + hook + " failed" +
                      (step >= 0 ? " at step " + std::to_string(step) : "") +
                      ": it threw something that is not a std::exception (no message)");
  }
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
  return call("train_dataset", -1, [&] { return system_->train_dataset(); });
}

std::shared_ptr<Dataset> PluginSystem::val_dataset() {
  if (minor() < 1) return nullptr;
  return call("val_dataset", -1, [&] { return system_->val_dataset(); });
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
    l.factor = [plugin = name(), optimizer = l.optimizer, factor = std::move(l.factor)](int64_t t) {
      try {
        return factor(t);
      } catch (const Error&) {
        throw;
      } catch (const std::exception& e) {
        throw PluginError(
            plugin_failure(plugin, "the lr factor of optimizer " + optimizer + " at t=" + std::to_string(t), -1, e));
      }
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
