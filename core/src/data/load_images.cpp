#include "data/load_images.hpp"

#include <filesystem>

#include "gantry/errors.hpp"
#include "data/cifar10.hpp"
#include "data/image_folder.hpp"

namespace gantry {

ImageDataset load_split(const DataOptions& data, Split split, const std::vector<int64_t>& shape) {
  const std::string& prefix = split == Split::kTrain ? data.train_prefix : data.val_prefix;
  if (data.format == DataFormat::kCifar10) return load_cifar10(data.path, prefix);
  if (data.format == DataFormat::kImageFolder) {
    const std::filesystem::path sub = std::filesystem::path(data.path) / prefix;
    std::error_code ec;
    if (std::filesystem::is_directory(sub, ec)) return load_image_folder(sub.string(), shape);
    if (split == Split::kVal)
      throw DataError(data.path + ": no validation folder " + prefix + "/ (data.val_prefix; data.format image_folder)");
    return load_image_folder(data.path, shape);
  }
  return load_idx_images(data.path, prefix);
}

}  // namespace gantry
