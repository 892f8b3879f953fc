#include "fused_adam.hpp"

#include "fused_adam_kernel.hpp"

#include <ATen/Parallel.h>
#include <c10/util/string_utils.h>

#include <cmath>
#include <string>

namespace gantry {

namespace {

void adam_kernel(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  // Chunks of 64 KiB of floats per task: big tensors use every intra-op thread.
  at::parallel_for(0, n, 16384, [&](int64_t begin, int64_t end) {
    adam_update(p + begin, g + begin, m + begin, v + begin, end - begin, s);
  });
}

bool dense_cpu_float(const torch::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous() &&
         t.layout() == torch::kStrided;
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

void fused_adam_step(torch::optim::Optimizer& opt) {
  torch::NoGradGuard no_grad;
  auto& state = opt.state();
  for (auto& group : opt.param_groups()) {
    const auto& o = static_cast<const torch::optim::AdamOptions&>(group.options());
    for (auto& p : group.params()) {
      const torch::Tensor& g = p.grad();
      if (!g.defined()) continue;
      TORCH_CHECK(dense_cpu_float(p), "fused Adam: a parameter is not dense, contiguous float32 on the CPU");
      const torch::Tensor grad = dense_cpu_float(g) ? g : g.to(torch::kFloat).contiguous();
      const std::string key = c10::guts::to_string(p.unsafeGetTensorImpl());
      auto it = state.find(key);
      if (it == state.end()) {  // as Adam::step initialises it
        auto s = std::make_unique<torch::optim::AdamParamState>();
        s->step(0);
        s->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        s->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        it = state.emplace(key, std::move(s)).first;
      }
      auto& st = static_cast<torch::optim::AdamParamState&>(*it->second);
      TORCH_CHECK(dense_cpu_float(st.exp_avg()) && dense_cpu_float(st.exp_avg_sq()),
                  "fused Adam: the optimizer state is not dense float32 (loaded from another build?)");
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
  }
}

}  // namespace gantry
