#include "train/fused_adam.hpp"

#include <sstream>
#include <type_traits>

#include "train/fused_adam_kernel.hpp"

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <c10/util/string_utils.h>

#include <cmath>
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
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat &&
         t.layout() == torch::kStrided && t.is_non_overlapping_and_dense();
}

// `t` laid out element for element as `like` (same sizes, same strides).
bool same_layout(const torch::Tensor& t, const torch::Tensor& like) {
  return dense_cpu_float(t) && t.sizes() == like.sizes() && t.strides() == like.strides();
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
  auto& state = opt.state();
  const OptimizerStateKey key = optimizer_state_key(p);
  auto it = state.find(key);
  if (it == state.end()) {  // as Adam::step initialises it
    auto s = std::make_unique<torch::optim::AdamParamState>();
    s->step(0);
    s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state.emplace(key, std::move(s)).first;
  }
  auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
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

void fused_adam_step(torch::optim::Optimizer& opt) {
  torch::NoGradGuard no_grad;
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    for (auto& p : group.params()) step_param(opt, o, p);
  }
}

AdamInBackward::AdamInBackward(std::shared_ptr<torch::optim::Optimizer> opt,
                               const std::vector<torch::Tensor>& params)
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

}  // namespace gantry
