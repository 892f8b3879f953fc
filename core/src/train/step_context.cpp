#include "train/step_context.hpp"

#include <chrono>
#include <cmath>

#include "gantry/errors.hpp"
#include "runtime/runtime.hpp"
#include "train/precision.hpp"

namespace gantry {

OptimizerSlot& StepContextImpl::slot(const std::string& name, const char* call) {
  for (auto& s : slots_)
    if (s.name == name) return s;
  std::string names;
  for (const auto& s : slots_) names += (names.empty() ? "" : ", ") + s.name;
  throw std::invalid_argument(std::string(call) + "(\"" + name + "\"): no optimizer named '" + name +
                              "'; configure_optimizers() returned: " + names);
}

void StepContextImpl::optimize(const std::string& name, const torch::Tensor& loss) {
  OptimizerSlot& s = slot(name, "ctx.optimize");
  backward(s, loss, "ctx.optimize");
  if (!s.in_backward) step(s);  // in_backward: each parameter was stepped as backward reached it
}

void StepContextImpl::backward(const std::string& name, const torch::Tensor& loss) {
  OptimizerSlot& s = slot(name, "ctx.backward");
  // Stepping inside backward would leave nothing for step() and the plugin to see.
  if (s.in_backward) s.in_backward.reset();
  backward(s, loss, "ctx.backward");
}

void StepContextImpl::step(const std::string& name) { step(slot(name, "ctx.step")); }

void StepContextImpl::backward(OptimizerSlot& slot, const torch::Tensor& loss, const char* call) {
  const std::string& name = slot.name;
  TORCH_CHECK(loss.defined() && loss.numel() == 1, call, "(\"", name, "\") needs a scalar loss, got shape ",
              loss.defined() ? loss.sizes() : at::IntArrayRef{});
  TORCH_CHECK(loss.requires_grad(), call, "(\"", name,
              "\"): the loss does not require grad (computed under no_grad, or detached?)");
  // Backward into this optimizer's parameters only: autograd skips the weight
  // gradients of every other module (what Lightning's toggle_optimizer is for,
  // without having to call it before the forward).
  AutocastScope paused(device_, bf16_, AutocastScope::Mode::kOff);
  if (slot.in_backward) {
    const Profile::Scope timed(profile_, Profile::kBackward);  // and the step, as backward reaches each parameter
    slot.in_backward->backward_and_step(loss);
    if (bf16_) autocast_weights_changed();
    return;
  }
  // Accumulation: the k losses' mean, summed into the gradients; only the k-th
  // backward all-reduces (the Reducer's hooks do nothing without prepare(),
  // as under DDP's no_sync), averaging what every rank summed.
  const torch::Tensor scaled = slot.accumulate > 1 ? loss / static_cast<double>(slot.accumulate) : loss;
  const bool last = ++slot.micro >= slot.accumulate;
  if (slot.sync && last) {
    slot.sync->prepare();  // its hooks all-reduce these gradients during backward
    try {
      const auto start = std::chrono::steady_clock::now();
      {
        const Profile::Scope timed(profile_, Profile::kBackward);
        scaled.backward({}, c10::nullopt, false, slot.params);
      }
      // Gloo's Reducer waits for the all-reduce inside backward: what came
      // after this rank's last gradient was that wait, not its compute.
      const auto last = slot.sync->last_gradient(), end = std::chrono::steady_clock::now();
      if (profile_ && last > start && last < end)
        profile_->shift(Profile::kBackward, Profile::kAllReduce, std::chrono::duration<double>(end - last).count());
      const Profile::Scope timed(profile_, Profile::kAllReduce);
      slot.sync->finish();  // the shared-memory exchange; Gloo's ran during backward
    } catch (const std::exception& e) {
      const std::string silent = slot.sync->silent_ranks();
      throw Error("rank " + std::to_string(rank_) + ": " + call + "(\"" + name + "\") at step " +
                  std::to_string(step_) + ": backward or its gradient all-reduce failed (" +
                  (silent.empty() ? "if another rank died or hung, its output says why" : silent) +
                  "): " + error_text(e));
    }
  } else {
    const Profile::Scope timed(profile_, Profile::kBackward);
    scaled.backward({}, c10::nullopt, false, slot.params);
  }
}

void StepContextImpl::step(OptimizerSlot& slot) {
  if (slot.accumulate > 1 && slot.micro < slot.accumulate) return;  // accumulating: the k-th call steps
  slot.micro = 0;
  const Profile::Scope timed(profile_, Profile::kOptimizer);
  if (slot.keep_grads) {  // for the histograms: the averaged gradients, before clipping
    slot.kept.clear();
    for (const auto& p : slot.params) slot.kept.push_back(p.grad().defined() ? p.grad().detach().clone() : p.grad());
  }
  if (slot.log_norm) {  // the averaged gradients' total 2-norm, before clipping (on the device: no host read)
    std::vector<torch::Tensor> norms;
    for (const auto& p : slot.params)
      if (p.grad().defined()) norms.push_back(p.grad().detach().to(torch::kFloat32).norm());
    if (!norms.empty()) log("grad_norm_" + slot.name, torch::stack(norms).norm(), Reduce::kMean, false);
  }
  if (slot.clip > 0) {  // averaged gradients, before the step (Lightning's gradient_clip_val)
    if (slot.clip_by_norm)
      torch::nn::utils::clip_grad_norm_(slot.params, slot.clip);
    else
      torch::nn::utils::clip_grad_value_(slot.params, slot.clip);
  }
  if (slot.device_adam)
    slot.device_adam->step();
  else if (slot.fused)
    fused_adam_step(*slot.optimizer);
  else
    slot.optimizer->step();
  for (auto& p : slot.params) p.mutable_grad().reset();  // zero_grad(set_to_none=True)
  if (bf16_) autocast_weights_changed();
}

void StepContextImpl::log(const std::string& name, const torch::Tensor& value, bool sync) {
  log(name, value, Reduce::kMean, sync);
}

void StepContextImpl::log(const std::string& name, const torch::Tensor& value, Reduce reduce, bool sync) {
  TORCH_CHECK(value.numel() == 1, "ctx.log(\"", name, "\") needs a scalar, got shape ", value.sizes());
  TORCH_CHECK(uint32_t(reduce) <= uint32_t(Reduce::kLast), "ctx.log(\"", name, "\"): unknown reduction ",
              uint32_t(reduce));
  for (auto& v : values_)
    if (v.name == name) {
      v.value = value.detach();
      v.sync = sync;
      v.reduce = reduce;
      return;
    }
  values_.push_back({name, value.detach(), sync, reduce});
}

void StepContextImpl::log_image(const std::string& tag, const torch::Tensor& images, double low, double high) {
  TORCH_CHECK(std::isfinite(low) && std::isfinite(high) && low < high, "ctx.log_image(\"", tag,
              "\"): the range must be finite with low < high, got [", low, ", ", high, "]");
  image_sink_(tag, images, low, high);
}

std::string StepContextImpl::take_host_reads() {
  std::string out;
  for (auto [flag, what] : {std::pair{kReadStep, "ctx.global_step()"}, std::pair{kReadEpoch, "ctx.epoch()"},
                            std::pair{kReadBatch, "ctx.next_batch()"}})
    if (host_reads_ & flag) out += (out.empty() ? "" : ", ") + std::string(what);
  host_reads_ = 0;
  return out;
}

void StepContextImpl::log(const std::string& name, double value, bool sync) {
  log(name, torch::scalar_tensor(value, torch::kFloat64), sync);
}

}  // namespace gantry
