// Memory layout of Linear weights, chosen for the CPU's matrix products.
//
// A torch::nn::Linear computes x . W^T with W stored [out, in] row by row. When
// a row is a multiple of 4 KiB long (in_features a multiple of 1024 floats),
// the forward product walks W with a stride that maps every row to the same
// L1/L2 cache sets, and OpenBLAS slows down by a third at batch 64 on this
// machine (1024 -> 784: 1.43 ms instead of 1.05 ms). Storing such a weight
// transposed (column-major: the same [out, in] tensor with strides {1, out})
// makes that product contiguous. The backward products barely change, unless
// out_features is a multiple of 1024 too, so those weights are left as built.
// Only the storage order changes: shape, values, names, checkpoints (saved
// contiguous) and the math are the same; results differ by float rounding.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

/// Whether a float32 CPU Linear weight of this shape is better stored
/// transposed: in_features a multiple of 1024, out_features not.
GANTRY_CORE_EXPORT bool prefers_transposed_weight(int64_t out_features, int64_t in_features);

/// Re-lays out every Linear weight under `root` that prefers it (float32, on
/// the CPU, still contiguous); returns their names ("model.8.weight"), prefixed
/// with `prefix`. The parameters stay the same tensors (set_data), so
/// optimizers that hold them keep working.
GANTRY_CORE_EXPORT std::vector<std::string> transpose_linear_weights(torch::nn::Module& root,
                                                                     const std::string& prefix = "");

}  // namespace gantry
