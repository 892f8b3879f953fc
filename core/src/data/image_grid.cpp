#include "data/image_grid.hpp"

#include <torch/torch.h>

namespace gantry {

Image8 make_grid(const torch::Tensor& images, int64_t nrow, int64_t padding, double low, double high) {
  TORCH_CHECK(images.dim() == 4, "log_image expects images [N, C, H, W], got ", images.sizes());
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  TORCH_CHECK(c == 1 || c == 3, "log_image expects 1 or 3 channels, got ", c);
  TORCH_CHECK(n > 0, "log_image got no images");
  TORCH_CHECK(high > low, "image range is empty");
  const int64_t cols = std::min(nrow, n);
  const int64_t rows = (n + cols - 1) / cols;
  const int64_t gh = rows * (h + padding) + padding, gw = cols * (w + padding) + padding;
  // [N, C, H, W] in [low, high] -> uint8 [N, H, W, C]
  torch::Tensor px = images.detach().to(torch::kCPU, torch::kFloat32);
  px = ((px - low) * (255.0 / (high - low))).round_().clamp_(0, 255).to(torch::kUInt8);
  px = px.permute({0, 2, 3, 1}).contiguous();
  torch::Tensor grid = torch::zeros({gh, gw, c}, torch::kUInt8);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t y = padding + (i / cols) * (h + padding), x = padding + (i % cols) * (w + padding);
    grid.slice(0, y, y + h).slice(1, x, x + w).copy_(px[i]);
  }
  Image8 out;
  out.width = static_cast<int>(gw);
  out.height = static_cast<int>(gh);
  out.channels = static_cast<int>(c);
  out.pixels.assign(grid.data_ptr<uint8_t>(), grid.data_ptr<uint8_t>() + grid.numel());
  return out;
}

}  // namespace gantry
