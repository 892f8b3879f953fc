#include "data/image_folder.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "gantry/errors.hpp"
#include "io/image_file.hpp"

namespace gantry {

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> images_below(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink))
    if (e.is_regular_file() && is_image_file_name(e.path().filename().string())) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

std::string shape_text(int c, int h, int w) {
  return std::to_string(c) + "x" + std::to_string(h) + "x" + std::to_string(w);
}

}  // namespace

ImageDataset load_image_folder(const std::string& dir, const std::vector<int64_t>& shape) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(dir + ": data.path is not a directory (data.format image_folder)");
  if (!shape.empty() && (shape.size() != 3 || (shape[0] != 1 && shape[0] != 3) || shape[1] <= 0 || shape[2] <= 0))
    throw DataError(dir + ": the plugin asks for samples of shape [" + [&] {
      std::string s;
      for (auto d : shape) s += (s.empty() ? "" : ", ") + std::to_string(d);
      return s;
    }() + "]; an image folder gives [C, H, W] with C 1 or 3");
  // Class subfolders, or images directly in the folder: not both.
  std::vector<fs::path> classes, direct;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory())
      classes.push_back(e.path());
    else if (e.is_regular_file() && is_image_file_name(e.path().filename().string()))
      direct.push_back(e.path());
  }
  std::sort(classes.begin(), classes.end());
  std::sort(direct.begin(), direct.end());
  if (!classes.empty() && !direct.empty())
    throw DataError(dir + ": holds both images (" + direct[0].filename().string() + ") and class folders (" +
                    classes[0].filename().string() + "/): put every image in a class folder, or none");
  std::vector<std::pair<fs::path, int64_t>> files;  // path, label (-1: none)
  for (size_t c = 0; c < classes.size(); ++c)
    for (auto& p : images_below(classes[c])) files.emplace_back(std::move(p), int64_t(c));
  for (auto& p : direct) files.emplace_back(std::move(p), -1);
  if (files.empty())
    throw DataError(dir + ": no image files (.png, .jpg, .jpeg, .bmp, .tga, .gif) in it or its subfolders");

  int c = shape.empty() ? 0 : int(shape[0]);
  int h = shape.empty() ? 0 : int(shape[1]);
  int w = shape.empty() ? 0 : int(shape[2]);
  ImageDataset ds;
  ds.images_file = dir;
  torch::Tensor images;
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string path = files[i].first.string();
    Image8 img = read_image_file(path, c);
    if (i == 0 && shape.empty()) {
      c = img.channels;
      h = img.height;
      w = img.width;
    }
    if (!shape.empty())
      img = resize_image(img, w, h);
    else if (img.width != w || img.height != h)
      throw DataError(path + ": " + shape_text(c, img.height, img.width) + ", but " + files[0].first.string() + " is " +
                      shape_text(c, h, w) + " (a plugin whose DataSpec gives a shape gets every image resized to it)");
    if (i == 0) images = torch::empty({int64_t(files.size()), c, h, w}, torch::kUInt8);
    // HWC interleaved -> CHW.
    uint8_t* dst = images.data_ptr<uint8_t>() + int64_t(i) * c * h * w;
    for (int ch = 0; ch < c; ++ch)
      for (int p = 0; p < h * w; ++p) dst[ch * h * w + p] = img.pixels[size_t(p) * c + ch];
  }
  ds.images = images;
  if (!classes.empty()) {
    ds.labels = torch::empty({int64_t(files.size())}, torch::kInt64);
    int64_t* label = ds.labels.data_ptr<int64_t>();
    for (size_t i = 0; i < files.size(); ++i) label[i] = files[i].second;
  }
  return ds;
}

}  // namespace gantry
