// trainer.precision: "32" (everything float32) or "bf16-mixed" (Lightning's
// name): the plugin's forward passes run under LibTorch's autocast with
// bfloat16 on the accelerator's device type (CPU or CUDA). Weights, gradients
// and optimizer state stay float32 ("master weights"); autocast casts a
// float32 weight to bf16 where an op runs in bf16 (linear, matmul, conv, ...;
// LibTorch's own per-device lists decide which ops, see docs/precision.md),
// and backward produces float32 gradients for the float32 leaves. bf16 has
// float32's range, so no loss scaling is needed (unlike fp16).
#pragma once

#include <torch/types.h>

#include <string>

namespace gantry {

/// Autocast to bf16 on `device`'s type while alive when `bf16` is true (an
/// outer scope's setting is restored after); a no-op otherwise. Pause: the
/// same with autocast off (ctx.backward runs outside autocast, as PyTorch
/// recommends for backward).
class AutocastScope {
 public:
  enum class Mode { kBf16, kOff };
  AutocastScope(torch::Device device, bool active, Mode mode = Mode::kBf16);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_;
  c10::DeviceType type_;
  bool was_enabled_ = false;
  c10::ScalarType was_dtype_ = c10::ScalarType::Undefined;
};

/// After an optimizer changed weights in place inside an autocast scope:
/// drops autocast's cached bf16 copies of them (the cache is keyed by the
/// tensor, not its version, and would otherwise serve the old weights to the
/// next forward in the same training_step).
void autocast_weights_changed();

}  // namespace gantry
