#include "optim/fused_adam.hpp"

#include <sstream>
#include <type_traits>

#include "optim/fused_adam_kernel.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <c10/util/string_utils.h>

#include <cmath>
#include <optional>
#include <string>
#include <unordered_map>

namespace gantry {

namespace {

void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  // Chunks of 64 KiB of floats per task: big tensors use every intra-op thread.
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    adam_update(p + begin, g + begin, m + begin, v + begin, end - begin, s);
  });
}

// Dense float32 on the CPU: its elements fill one block of memory without gaps
// or overlaps, in any order of dimensions (a contiguous tensor, or e.g. a
// weight kept transposed by the runner's weight layout).
bool dense_cpu_float(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.layout() == torch::kStrided &&
         t.is_non_overlapping_and_dense();
}

// `t` laid out element for element as `like` (same sizes, same strides).
bool same_layout(const torch::Tensor& t, const torch::Tensor& like) {
  return dense_cpu_float(t) && t.sizes() == like.sizes() && t.strides() == like.strides();
}

}  // namespace

namespace {

template <class Key>  // a template, so that only the branch for this LibTorch's key type is compiled
Key state_key(const torch::Tensor& p) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;  // as 1.13's c10::guts::to_string prints the pointer
    s << static_cast<const void*>(p.unsafeGetTensorImpl());
    return s.str();
  } else {
    return static_cast<Key>(p.unsafeGetTensorImpl());
  }
}

}  // namespace

OptimizerStateKey optimizer_state_key(const torch::Tensor& p) { return state_key<OptimizerStateKey>(p); }

namespace {

// `p`'s state in `opt`, made as Adam::step makes it on the first step.
torch::optim::AdamParamState& adam_state(torch::optim::Optimizer& opt, const torch::Tensor& p) {
  auto& state = opt.state();
  const OptimizerStateKey key = optimizer_state_key(p);
  auto it = state.find(key);
  if (it == state.end()) {
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(0);
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state.emplace(key, std::move(s)).first;
  }
  return static_cast<torch::optim::AdamParamState&>(*it->second);
}

}  // namespace

bool fused_adam_applies(const torch::optim::Optimizer& opt) {
  if (!dynamic_cast<const torch::optim::Adam*>(&opt)) return false;
  for (const auto& group : opt.param_groups()) {
    if (static_cast<const torch::optim::AdamOptions&>(group.options()).amsgrad()) return false;
    for (const auto& p : group.params())
      if (!dense_cpu_float(p)) return false;
  }
  return true;
}

namespace {

// One parameter's step; `o` is the options of its group.
void step_param(torch::optim::Optimizer& opt, const torch::optim::AdamOptions& o, const torch::Tensor& p) {
  const torch::Tensor& g = p.grad();
  if (!g.defined()) return;
  TORCH_CHECK(dense_cpu_float(p), "fused Adam: a parameter is not dense float32 on the CPU");
  // The kernel walks p, g, m and v as flat arrays: all four in p's layout.
  torch::Tensor grad = g;
  if (!same_layout(grad, p)) {
    grad = torch::empty_like(p, torch::MemoryFormat::Preserve);
    grad.copy_(g);
  }
  auto& st = adam_state(opt, p);
  for (torch::Tensor* buf : {&st.exp_avg(), &st.exp_avg_sq()})
    if (!same_layout(*buf, p)) {  // e.g. state loaded from a checkpoint into a re-laid-out weight
      TORCH_CHECK(buf->sizes() == p.sizes() && buf->device().is_cpu(),
                  "fused Adam: the optimizer state does not match its parameter's shape");
      torch::Tensor relaid = torch::empty_like(p, torch::MemoryFormat::Preserve);
      relaid.copy_(*buf);
      *buf = relaid;
    }
  st.step(st.step() + 1);
  const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
  const double bc1 = 1 - std::pow(b1, static_cast<double>(st.step()));
  const double bc2 = 1 - std::pow(b2, static_cast<double>(st.step()));
  // Scalars are rounded to float as ATen's float kernels round them.
  const AdamScalars s{static_cast<float>(b1),
                      static_cast<float>(1 - b1),
                      static_cast<float>(b2),
                      static_cast<float>(1 - b2),
                      static_cast<float>(std::sqrt(bc2)),
                      static_cast<float>(o.eps()),
                      static_cast<float>(-(o.lr() / bc1)),
                      static_cast<float>(o.weight_decay())};
  adam_kernel(p.data_ptr<float>(), grad.data_ptr<float>(), st.exp_avg().data_ptr<float>(),
              st.exp_avg_sq().data_ptr<float>(), p.numel(), s);
}

}  // namespace

void fused_adam_step(torch::optim::Optimizer& opt) {
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    for (auto& p : group.params()) step_param(opt, o, p);
  }
}

AdamInBackward::AdamInBackward(std::shared_ptr<torch::optim::Optimizer> opt, const std::vector<torch::Tensor>& params)
    : opt_(std::move(opt)), params_(params), armed_(std::make_shared<bool>(false)) {
  // Each parameter's group options, found once here rather than by a search
  // on every step (the options object stays put; a changed lr is seen).
  std::unordered_map<const c10::TensorImpl*, const torch::optim::AdamOptions*> group_of;
  for (auto& group : opt_->param_groups())
    for (auto& p : group.params())
      group_of.emplace(p.unsafeGetTensorImpl(), &static_cast<const torch::optim::AdamOptions&>(group.options()));
  for (const auto& p : params_) {
    TORCH_CHECK(p.is_leaf() && p.requires_grad(), "AdamInBackward: parameters must be leaves that require grad");
    const auto found = group_of.find(p.unsafeGetTensorImpl());
    TORCH_CHECK(found != group_of.end(), "AdamInBackward: a parameter is not one of the optimizer's");
    options_.push_back(found->second);
    auto acc = torch::autograd::impl::grad_accumulator(p);
    acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [armed = armed_, opt = opt_.get(), o = found->second, param = p](
            const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) mutable {
          if (*armed) {
            torch::NoGradGuard no_grad;
            step_param(*opt, *o, param);
            param.mutable_grad().reset();
          }
          return outputs;
        }));
    accumulators_.push_back(std::move(acc));  // autograd keeps only a weak reference
  }
}

AdamInBackward::~AdamInBackward() { *armed_ = false; }

void AdamInBackward::backward_and_step(const torch::Tensor& loss) {
  struct Arm {
    bool& armed;
    explicit Arm(bool& a) : armed(a) { armed = true; }
    ~Arm() { armed = false; }
  } arm(*armed_);
  loss.backward({}, c10::nullopt, false, params_);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i)
    if (params_[i].grad().defined()) {
      step_param(*opt_, *options_[i], params_[i]);
      params_[i].mutable_grad().reset();
    }
}

// ---- DeviceAdam -------------------------------------------------------------

bool DeviceAdam::available() { return TORCH_VERSION_MAJOR >= 2; }

std::string DeviceAdam::why_not(const torch::optim::Optimizer& opt) {
  if (!available()) return "LibTorch " TORCH_VERSION " has no fused multi-tensor Adam (2.x has)";
  if (!dynamic_cast<const torch::optim::Adam*>(&opt)) return "it is not a torch::optim::Adam";
  std::optional<torch::Device> device;
  for (const auto& group : opt.param_groups()) {
    if (static_cast<const torch::optim::AdamOptions&>(group.options()).amsgrad()) return "it uses amsgrad";
    for (const auto& p : group.params()) {
      if (!p.defined() || p.scalar_type() != torch::kFloat || p.layout() != torch::kStrided || !p.is_contiguous())
        return "a parameter is not contiguous float32";
      if (device && p.device() != *device) return "its parameters are on more than one device";
      device = p.device();
    }
  }
  return "";
}

DeviceAdam::DeviceAdam(std::shared_ptr<torch::optim::Optimizer> opt) : opt_(std::move(opt)) {
  const std::string why = why_not(*opt_);
  TORCH_CHECK(why.empty(), "DeviceAdam: the optimizer cannot be stepped on the device: ", why);
  for (auto& group : opt_->param_groups()) {
    Group g;
    for (const auto& p : group.params()) g.params.push_back({p, {}});
    groups_.push_back(std::move(g));
  }
}

torch::optim::AdamParamState& DeviceAdam::state_of(const torch::Tensor& p) { return adam_state(*opt_, p); }

void DeviceAdam::prepare() {
  torch::NoGradGuard no_grad;
  auto& param_groups = opt_->param_groups();
  for (size_t i = 0; i < groups_.size(); ++i) {
    Group& g = groups_[i];
    for (Param& p : g.params)
      if (!p.step.defined())  // from the host's count: a resumed optimizer continues
        p.step = torch::full({}, static_cast<float>(state_of(p.param).step()),
                             torch::TensorOptions(torch::kFloat).device(p.param.device()));
    const double lr = static_cast<const torch::optim::AdamOptions&>(param_groups[i].options()).lr();
    if (g.params.empty() || lr == g.lr_value) continue;
    if (!g.lr.defined())
      g.lr = torch::empty({}, torch::TensorOptions(torch::kFloat).device(g.params[0].param.device()));
    g.lr.fill_(lr);
    g.lr_value = lr;
  }
}

void DeviceAdam::step() {
#if TORCH_VERSION_MAJOR >= 2
  torch::NoGradGuard no_grad;
  if (!recording_) prepare();
  auto& param_groups = opt_->param_groups();
  for (size_t i = 0; i < groups_.size(); ++i) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(param_groups[i].options());
    std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, steps;
    for (Param& p : groups_[i].params) {
      const torch::Tensor& grad = p.param.grad();
      if (!grad.defined()) continue;  // as Adam::step: no gradient, no step
      auto& st = state_of(p.param);
      TORCH_CHECK(p.step.defined(), "DeviceAdam: a parameter's step tensor was not made before capture");
      params.push_back(p.param);
      grads.push_back(grad.is_contiguous() ? grad : grad.contiguous());
      exp_avgs.push_back(st.exp_avg());
      exp_avg_sqs.push_back(st.exp_avg_sq());
      steps.push_back(p.step);
      st.step(st.step() + 1);
      if (recording_) recorded_.push_back(&st);
    }
    if (params.empty()) continue;
    at::_foreach_add_(steps, 1);
    const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
    if (groups_[i].lr.device().is_cpu())  // the CPU kernel reads a host lr anyway
      at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, o.lr(), b1, b2, o.weight_decay(), o.eps(),
                       /*amsgrad=*/false, /*maximize=*/false);
    else
      at::_fused_adam_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, groups_[i].lr, b1, b2, o.weight_decay(),
                       o.eps(), /*amsgrad=*/false, /*maximize=*/false);
  }
#else
  TORCH_CHECK(false, "DeviceAdam needs LibTorch 2.x");
#endif
}

void DeviceAdam::start_recording() {
  recorded_.clear();
  recording_ = true;
}

void DeviceAdam::replayed() {
  for (auto* st : recorded_) st->step(st->step() + 1);
}

void DeviceAdam::undo_recorded() {
  for (auto* st : recorded_) st->step(st->step() - 1);
  recorded_.clear();
  recording_ = false;
}

}  // namespace gantry
