// A folder of image files (PNG, JPEG, ...) as an in-memory ImageDataset, in
// torchvision's ImageFolder layout.
#pragma once

#include <string>
#include <vector>

#include "gantry/core_export.hpp"
#include "data/idx_dataset.hpp"

namespace gantry {

/// Reads every image file under `dir`: either class subfolders (sorted by
/// name: the first is label 0; images at any depth below them), or images
/// directly in `dir` (no labels). Files are taken in sorted path order; other
/// files are ignored. Each image is converted to `shape`'s channels (1 gray
/// or 3 RGB) and resized to its H x W ([C, H, W], what the plugin's DataSpec
/// asks for); with `shape` empty the first image sets channels and size and
/// every other must match. Throws DataError naming the folder or the file.
GANTRY_CORE_EXPORT ImageDataset load_image_folder(const std::string& dir, const std::vector<int64_t>& shape);

}  // namespace gantry
