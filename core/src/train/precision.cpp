#include "train/precision.hpp"

#include <ATen/autocast_mode.h>

namespace gantry {

namespace {

// LibTorch 2.x names the device type; 1.13 has a function per device type.
bool autocast_enabled(c10::DeviceType type) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

void set_autocast_enabled(c10::DeviceType type, bool on) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_enabled(type, on);
#else
  type == c10::DeviceType::CUDA ? at::autocast::set_enabled(on) : at::autocast::set_cpu_enabled(on);
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType type) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

void set_autocast_dtype(c10::DeviceType type, c10::ScalarType dtype) {
#if TORCH_VERSION_MAJOR >= 2
  at::autocast::set_autocast_dtype(type, dtype);
#else
  type == c10::DeviceType::CUDA ? at::autocast::set_autocast_gpu_dtype(dtype)
                                : at::autocast::set_autocast_cpu_dtype(dtype);
#endif
}

}  // namespace

AutocastScope::AutocastScope(torch::Device device, bool active, Mode mode) : active_(active), type_(device.type()) {
  if (!active_) return;
  was_enabled_ = autocast_enabled(type_);
  was_dtype_ = autocast_dtype(type_);
  // As torch.autocast's __enter__: nesting counts the scopes, so that the
  // cache of bf16 copies of the weights is cleared when the outermost ends.
  at::autocast::increment_nesting();
  set_autocast_enabled(type_, mode == Mode::kBf16);
  if (mode == Mode::kBf16) set_autocast_dtype(type_, at::kBFloat16);
}

void autocast_weights_changed() { at::autocast::clear_cache(); }

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_enabled(type_, was_enabled_);
  set_autocast_dtype(type_, was_dtype_);
}

}  // namespace gantry
