// A minimal PNG codec for 8-bit grayscale / RGB / RGBA images: enough to write
// image grids and to read them back in tests. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

struct Image8 {
  int width = 0;
  int height = 0;
  int channels = 0;             ///< 1 (gray), 3 (RGB) or 4 (RGBA)
  std::vector<uint8_t> pixels;  ///< row-major, channels interleaved
};

/// Encodes `img` as PNG bytes (zlib level 6, filter 0).
GANTRY_CORE_EXPORT std::string encode_png(const Image8& img);
/// Decodes a PNG of the kind encode_png writes (8-bit, not interlaced, any
/// filter); throws std::runtime_error on anything else or on corrupt data.
GANTRY_CORE_EXPORT Image8 decode_png(const std::string& bytes);

}  // namespace gantry
