// IDX files (the MNIST format), raw or gzip-compressed, as tensors.
#pragma once

#include <string>

#include <torch/types.h>

#include "gantry/core_export.hpp"

namespace gantry {

/// An image dataset held in memory as uint8: images [N, C, H, W] (C = 1 for
/// 3-d IDX files), labels [N] int64 or undefined.
struct ImageDataset {
  torch::Tensor images;
  torch::Tensor labels;
  std::string images_file;

  int64_t size() const { return images.size(0); }
};

/// Reads one IDX file (magic 0x0000080N, unsigned byte data) into a uint8
/// tensor shaped as its header says. Accepts `.gz` (or any gzip file) and raw.
/// Throws DataError naming the file for a missing file, wrong magic, a header
/// that does not fit, or truncated data.
GANTRY_CORE_EXPORT torch::Tensor read_idx(const std::string& path);

/// Ranks of one host decode an IDX file once: with sharing on, the first to
/// read it writes it decoded to /dev/shm (gantry_data_<hash of its path, size
/// and time>) and every rank maps that copy (the memory counts once, not once
/// per rank; the others skip the gunzip). Off by default; `gantry train` turns
/// it on for a rank of several on its host and calls release_shared_idx()
/// once every rank has loaded its data (after the rendezvous), which removes
/// the files (the mappings stay) and turns sharing off. A file left by a
/// crash is reused by the next run, or may be deleted at any time.
/// GANTRY_SHARE_DATA=0 in the environment keeps it off.
GANTRY_CORE_EXPORT void share_decoded_idx_on_host(bool on);
GANTRY_CORE_EXPORT void release_shared_idx();
/// Where the ranks of a host share `path` decoded ("" when it cannot be read).
GANTRY_CORE_EXPORT std::string shared_idx_file(const std::string& path);

/// Reads `<dir>/<prefix>-images-idx3-ubyte[.gz]` and, when present,
/// `<dir>/<prefix>-labels-idx1-ubyte[.gz]`.
GANTRY_CORE_EXPORT ImageDataset load_idx_images(const std::string& dir, const std::string& prefix);

/// The file `<dir>/<stem>` or `<dir>/<stem>.gz`, whichever exists ("" if neither).
GANTRY_CORE_EXPORT std::string find_idx_file(const std::string& dir, const std::string& stem);

}  // namespace gantry
