// CIFAR-10's binary format (the official cifar-10-batches-bin layout): files of
// 10000 records, each 1 label byte then 3072 pixel bytes (1024 red, 1024
// green, 1024 blue, rows top to bottom): exactly a uint8 [N, 3, 32, 32].
#pragma once

#include <string>

#include "gantry/core_export.hpp"
#include "data/idx_dataset.hpp"

namespace gantry {

/// Reads the split `prefix` of the CIFAR-10 folder `dir` (or of
/// `dir/cifar-10-batches-bin` when `dir` holds that folder): `<prefix>.bin`
/// and `<prefix>_1.bin`, `<prefix>_2.bin`, ... in number order (the official
/// splits: data_batch = train, test_batch = test). Throws DataError naming
/// the file for a size that is not a whole number of records or a label
/// above 9 (CIFAR-100's two-label records are not this format).
GANTRY_CORE_EXPORT ImageDataset load_cifar10(const std::string& dir, const std::string& prefix);

}  // namespace gantry
