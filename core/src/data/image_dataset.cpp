#include "data/image_dataset.hpp"

#include <torch/torch.h>

namespace gantry {

ImageTensorDataset::ImageTensorDataset(ImageDataset images, double low, double high)
    : images_(std::move(images)), scale_(static_cast<float>((high - low) / 255.0)), offset_(static_cast<float>(low)) {}

Batch ImageTensorDataset::get(int64_t index) const {
  Batch b = gather(&index, 1, false);
  b.input = b.input[0];
  if (b.target.defined()) b.target = b.target[0];
  return b;
}

Batch ImageTensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return gather(indices.data(), static_cast<int64_t>(indices.size()), false);
}

Batch ImageTensorDataset::gather(const int64_t* idx, int64_t n, bool pinned) const {
  const torch::Tensor& images = images_.images;
  const int64_t sample = images.numel() / images.size(0);
  std::vector<int64_t> shape = images.sizes().vec();
  shape[0] = n;
  Batch b;
  b.input = torch::empty(shape, torch::TensorOptions(torch::kFloat32).pinned_memory(pinned));
  const uint8_t* src = images.data_ptr<uint8_t>();
  float* dst = b.input.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* s = src + idx[i] * sample;
    float* d = dst + i * sample;
    for (int64_t j = 0; j < sample; ++j) d[j] = static_cast<float>(s[j]) * scale_ + offset_;
  }
  if (images_.labels.defined()) {
    b.target = torch::empty({n}, torch::TensorOptions(torch::kInt64).pinned_memory(pinned));
    const int64_t* l = images_.labels.data_ptr<int64_t>();
    int64_t* t = b.target.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) t[i] = l[idx[i]];
  }
  return b;
}

}  // namespace gantry
