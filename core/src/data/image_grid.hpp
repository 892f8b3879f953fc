// Image batches -> one grid image (torchvision's make_grid layout).
#pragma once

#include <torch/types.h>

#include <algorithm>
#include <cstdint>

#include "gantry/core_export.hpp"
#include "io/png.hpp"

namespace gantry {

/// Lays `images` [N, C, H, W] (C 1 or 3; values in [low, high]) out as a grid
/// with `nrow` images per row and `padding` pixels of black between them.
/// Values outside [low, high] are clamped.
/// Images a row for `n` images in `rows` rows (0 rows: 8 a row, torchvision's default).
inline int64_t grid_columns(int64_t n, int64_t rows) {
  return rows > 0 ? std::max<int64_t>(1, (n + rows - 1) / rows) : 8;
}

GANTRY_CORE_EXPORT Image8 make_grid(const torch::Tensor& images, int64_t nrow = 8, int64_t padding = 2,
                                    double low = -1.0, double high = 1.0);

}  // namespace gantry
