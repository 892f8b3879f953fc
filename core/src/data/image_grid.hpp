// Image batches -> one grid image (torchvision's make_grid layout).
#pragma once

#include <torch/types.h>

#include "gantry/core_export.hpp"
#include "io/png.hpp"

namespace gantry {

/// Lays `images` [N, C, H, W] (C 1 or 3; values in [low, high]) out as a grid
/// with `nrow` images per row and `padding` pixels of black between them.
/// Values outside [low, high] are clamped.
GANTRY_CORE_EXPORT Image8 make_grid(const torch::Tensor& images, int64_t nrow = 8, int64_t padding = 2,
                                    double low = -1.0, double high = 1.0);

}  // namespace gantry
