#include "optim/fused_adam_kernel.hpp"

#include <cmath>

namespace gantry {

namespace {

// The update of Adam::step (LibTorch 1.13), element by element:
//   g' = g + wd * p                                (when weight_decay != 0)
//   m  = m * b1 + (1 - b1) * g'                    exp_avg.mul_(b1).add_(g, 1 - b1)
//   v  = v * b2 + (1 - b2) * g' * g'               exp_avg_sq.mul_(b2).addcmul_(g, g, 1 - b2)
//   p  = p - lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)   p.addcdiv_(m, denom, -step_size)
template <bool kDecay>
inline __attribute__((always_inline)) void adam_loop(float* __restrict p, const float* __restrict g,
                                                     float* __restrict m, float* __restrict v, int64_t n,
                                                     const AdamScalars& s) {
#pragma GCC ivdep
  for (int64_t i = 0; i < n; ++i) {
    const float grad = kDecay ? g[i] + s.wd * p[i] : g[i];
    const float mi = m[i] * s.b1 + s.a1 * grad;
    const float vi = v[i] * s.b2 + s.a2 * grad * grad;
    m[i] = mi;
    v[i] = vi;
    p[i] = p[i] + s.neg_step * (mi / (std::sqrt(vi) / s.s2 + s.eps));
  }
}

inline __attribute__((always_inline)) void adam_body(float* p, const float* g, float* m, float* v, int64_t n,
                                                     const AdamScalars& s) {
  if (s.wd != 0)
    adam_loop<true>(p, g, m, v, n, s);
  else
    adam_loop<false>(p, g, m, v, n, s);
}

#if defined(__x86_64__)
__attribute__((target("avx2,fma"))) void adam_avx2(float* p, const float* g, float* m, float* v, int64_t n,
                                                   const AdamScalars& s) {
  adam_body(p, g, m, v, n, s);
}
const bool kHaveAvx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif

void adam_generic(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
  adam_body(p, g, m, v, n, s);
}

}  // namespace

void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s) {
#if defined(__x86_64__)
  if (kHaveAvx2) return adam_avx2(p, g, m, v, n, s);
#endif
  adam_generic(p, g, m, v, n, s);
}

}  // namespace gantry
