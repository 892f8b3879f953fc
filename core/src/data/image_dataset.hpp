// Images the runner reads (data.format: IDX, an image folder, CIFAR-10) as a
// gantry::Dataset, like a plugin's own: the DataLoader, sharding, mid-epoch
// resume and the trainer see one kind of data.
#pragma once

#include <memory>
#include <vector>

#include "data/idx_dataset.hpp"
#include "gantry/core_export.hpp"
#include "gantry/system.hpp"

namespace gantry {

/// uint8 images [N, C, H, W] (+ int64 labels) served as float samples scaled
/// from [0, 255] to the plugin's [low, high] (DataSpec), labels as targets.
class GANTRY_CORE_EXPORT ImageTensorDataset final : public Dataset {
 public:
  ImageTensorDataset(ImageDataset images, double low, double high);

  int64_t size() const override { return images_.size(); }
  Batch get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  /// The samples at idx[0..n) as one batch, in page-locked memory when
  /// `pinned` (a CUDA build copying batches to a GPU). A plain gather and
  /// scale loop: no ATen parallel region on the loader's thread, so it never
  /// competes with the training thread's intra-op pool.
  Batch gather(const int64_t* idx, int64_t n, bool pinned) const;

  const ImageDataset& images() const { return images_; }

 private:
  ImageDataset images_;
  float scale_, offset_;
};

}  // namespace gantry
