// The fused Adam's element loop (fused_adam.hpp), in a translation unit of its
// own: it is compiled with -O3 -fno-math-errno (so sqrt vectorises), flags the
// precompiled LibTorch header cannot share, and it needs no LibTorch.
#pragma once

#include <cstdint>

namespace gantry {

struct AdamScalars {
  float b1, a1, b2, a2, s2, eps, neg_step,
      wd;  ///< beta1, 1-beta1, beta2, 1-beta2, sqrt(bc2), eps, -lr/bc1, weight decay
};

/// The Adam update of n elements of p with gradient g and moments m, v (AVX2/FMA when the CPU has them).
void adam_update(float* p, const float* g, float* m, float* v, int64_t n, const AdamScalars& s);

}  // namespace gantry
