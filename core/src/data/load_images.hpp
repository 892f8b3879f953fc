// The runner's built-in image data, by data.format: IDX files (MNIST's
// format), a folder of image files, or CIFAR-10's binary batches. Each gives
// an in-memory uint8 ImageDataset [N, C, H, W] (+ labels) for the DataLoader.
#pragma once

#include <cstdint>
#include <vector>

#include "config/config.hpp"
#include "data/idx_dataset.hpp"

namespace gantry {

enum class Split { kTrain, kVal };

/// The training or validation split of the data `data` names:
///   idx           <path>/<prefix>-images-idx3-ubyte[.gz] (+ labels)
///   image_folder  <path>/<prefix>/ when that folder exists, else (training
///                 split only) <path>/ itself; resized to `shape`
///   cifar10       <path>[/cifar-10-batches-bin]/<prefix>[_<n>].bin
/// (`prefix` is data.train_prefix or data.val_prefix). `shape` is the
/// plugin's DataSpec shape [C, H, W] (empty: any); only an image folder is
/// converted to it, the other formats are checked against it by the caller.
GANTRY_CORE_EXPORT ImageDataset load_split(const DataOptions& data, Split split, const std::vector<int64_t>& shape);

}  // namespace gantry
