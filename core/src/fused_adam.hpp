// Adam's update in one pass per parameter. LibTorch's Adam::step runs ~8
// element-wise kernels per parameter (mul_, add_, mul_, addcmul_, sqrt, div,
// add_, addcdiv_) and allocates two temporaries, each a full pass over memory;
// on this GAN that is ~25% of a step. fused_adam_step reads p, g, m, v once
// and writes p, m, v once (vectorised with AVX2/FMA where the CPU has them,
// split over LibTorch's intra-op threads), with the same math in the same
// order, on the optimizer's own state (exp_avg, exp_avg_sq, step), so a
// checkpoint is the same either way and the two can be mixed.
#pragma once

#include <torch/torch.h>

#include "gantry/core_export.hpp"

namespace gantry {

/// Whether fused_adam_step can do `opt`'s next step: a torch::optim::Adam
/// without amsgrad whose parameters are dense, contiguous float32 on the CPU.
GANTRY_CORE_EXPORT bool fused_adam_applies(const torch::optim::Optimizer& opt);

/// One Adam step of `opt` (see fused_adam_applies), identical to
/// torch::optim::Adam::step() up to float rounding. Parameters without a
/// gradient are skipped, as Adam does.
GANTRY_CORE_EXPORT void fused_adam_step(torch::optim::Optimizer& opt);

}  // namespace gantry
