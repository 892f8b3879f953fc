#include "data/idx_dataset.hpp"

#include <zlib.h>

#include <filesystem>
#include <memory>
#include <vector>

#include "gantry/errors.hpp"

namespace gantry {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes; returns how many were read.
size_t read_some(gzFile f, void* dst, size_t n, const std::string& path) {
  size_t total = 0;
  auto* out = static_cast<unsigned char*>(dst);
  while (total < n) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - total, 1u << 30));
    const int got = gzread(f, out + total, chunk);
    if (got < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw DataError(path + ": cannot read: " + (msg ? msg : "gzip error") + " (a corrupt or truncated .gz file?)");
    }
    if (got == 0) break;
    total += static_cast<size_t>(got);
  }
  return total;
}

}  // namespace

torch::Tensor read_idx(const std::string& path) {
  if (!std::filesystem::exists(path)) throw DataError(path + ": no such file");
  GzFile f(gzopen(path.c_str(), "rb"));  // reads raw files as they are, too
  if (!f) throw DataError(path + ": cannot open");
  unsigned char magic[4];
  if (read_some(f.get(), magic, 4, path) != 4) throw DataError(path + ": too short for an IDX header");
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != 0x08 || magic[3] < 1 || magic[3] > 4) {
    char hex[16];
    std::snprintf(hex, sizeof hex, "%02x%02x%02x%02x", magic[0], magic[1], magic[2], magic[3]);
    throw DataError(path + ": not an unsigned-byte IDX file (magic 0x" + hex + ", expected 0x00000801..0x00000804)");
  }
  const int ndim = magic[3];
  std::vector<int64_t> dims(ndim);
  size_t count = 1;
  for (int i = 0; i < ndim; ++i) {
    unsigned char b[4];
    if (read_some(f.get(), b, 4, path) != 4) throw DataError(path + ": truncated IDX header");
    dims[i] = (int64_t(b[0]) << 24) | (int64_t(b[1]) << 16) | (int64_t(b[2]) << 8) | int64_t(b[3]);
    if (dims[i] <= 0 || dims[i] > (1 << 28))
      throw DataError(path + ": IDX header has an implausible dimension " + std::to_string(dims[i]));
    count *= static_cast<size_t>(dims[i]);
    if (count > (size_t(1) << 36)) throw DataError(path + ": IDX header describes over 64 GiB");
  }
  auto data = torch::empty(dims, torch::kUInt8);
  const size_t got = read_some(f.get(), data.data_ptr<uint8_t>(), count, path);
  if (got != count)
    throw DataError(path + ": truncated: the header promises " + std::to_string(count) +
                    " bytes of data, the file has " + std::to_string(got));
  return data;
}

std::string find_idx_file(const std::string& dir, const std::string& stem) {
  const auto base = std::filesystem::path(dir) / stem;
  if (std::filesystem::exists(base)) return base.string();
  if (std::filesystem::exists(base.string() + ".gz")) return base.string() + ".gz";
  return "";
}

ImageDataset load_idx_images(const std::string& dir, const std::string& prefix) {
  if (!std::filesystem::is_directory(dir))
    throw DataError(dir +
                    ": data.path is not a directory (Fashion-MNIST: apt-get install "
                    "dataset-fashion-mnist, at /usr/share/datasets/fashion-mnist)");
  const std::string stem = prefix + "-images-idx3-ubyte";
  const std::string images_file = find_idx_file(dir, stem);
  if (images_file.empty()) throw DataError(dir + ": no " + stem + " or " + stem + ".gz (data.path, data.train_prefix)");
  ImageDataset ds;
  ds.images_file = images_file;
  ds.images = read_idx(images_file);
  if (ds.images.dim() == 3)
    ds.images = ds.images.unsqueeze(1);
  else if (ds.images.dim() != 4)
    throw DataError(images_file + ": expected images as N x H x W or N x C x H x W, got " +
                    std::to_string(ds.images.dim()) + " dimensions");
  const std::string labels_file = find_idx_file(dir, prefix + "-labels-idx1-ubyte");
  if (!labels_file.empty()) {
    auto labels = read_idx(labels_file);
    if (labels.dim() != 1 || labels.size(0) != ds.images.size(0))
      throw DataError(labels_file + ": " + std::to_string(labels.numel()) + " labels for " +
                      std::to_string(ds.images.size(0)) + " images in " + images_file);
    ds.labels = labels.to(torch::kInt64);
  }
  return ds;
}

}  // namespace gantry
