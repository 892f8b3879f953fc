#include "train/step_context.hpp"

#include "config/errors.hpp"
#include "runtime/runtime.hpp"

namespace gantry {

void StepContextImpl::optimize(const std::string& name, const torch::Tensor& loss) {
  OptimizerSlot* slot = nullptr;
  for (auto& s : slots_)
    if (s.name == name) slot = &s;
  if (!slot) {
    std::string names;
    for (const auto& s : slots_) names += (names.empty() ? "" : ", ") + s.name;
    throw std::invalid_argument("ctx.optimize(\"" + name + "\"): no optimizer named '" + name +
                                "'; configure_optimizers() returned: " + names);
  }
  TORCH_CHECK(loss.defined() && loss.numel() == 1,
              "ctx.optimize(\"", name, "\") needs a scalar loss, got shape ",
              loss.defined() ? loss.sizes() : at::IntArrayRef{});
  TORCH_CHECK(loss.requires_grad(), "ctx.optimize(\"", name,
              "\"): the loss does not require grad (computed under no_grad, or detached?)");
  // Backward into this optimizer's parameters only: autograd skips the weight
  // gradients of every other module (what Lightning's toggle_optimizer is for,
  // without having to call it before the forward).
  if (slot->in_backward) {  // each parameter is stepped as backward reaches it
    slot->in_backward->backward_and_step(loss);
    return;
  }
  if (slot->sync) {
    slot->sync->prepare();  // its hooks all-reduce these gradients during backward
    try {
      loss.backward({}, c10::nullopt, false, slot->params);
      slot->sync->finish();  // the shared-memory exchange; Gloo's ran during backward
    } catch (const std::exception& e) {
      const std::string silent = slot->sync->silent_ranks();
      throw Error("rank " + std::to_string(rank_) + ": ctx.optimize(\"" + name + "\") at step " +
                  std::to_string(step_) + ": backward or its gradient all-reduce failed (" +
                  (silent.empty() ? "if another rank died or hung, its output says why" : silent) +
                  "): " + error_text(e));
    }
  } else {
    loss.backward({}, c10::nullopt, false, slot->params);
  }
  if (slot->clip > 0) {  // averaged gradients, before the step (Lightning's gradient_clip_val)
    if (slot->clip_by_norm)
      torch::nn::utils::clip_grad_norm_(slot->params, slot->clip);
    else
      torch::nn::utils::clip_grad_value_(slot->params, slot->clip);
  }
  if (slot->fused)
    fused_adam_step(*slot->optimizer);
  else
    slot->optimizer->step();
  for (auto& p : slot->params) p.mutable_grad().reset();  // zero_grad(set_to_none=True)
}

void StepContextImpl::log(const std::string& name, const torch::Tensor& value, bool sync) {
  TORCH_CHECK(value.numel() == 1, "ctx.log(\"", name, "\") needs a scalar, got shape ",
              value.sizes());
  for (auto& v : values_)
    if (v.name == name) {
      v.value = value.detach();
      v.sync = sync;
      return;
    }
  values_.push_back({name, value.detach(), sync});
}

void StepContextImpl::log(const std::string& name, double value, bool sync) {
  log(name, torch::scalar_tensor(value, torch::kFloat64), sync);
}

}  // namespace gantry
