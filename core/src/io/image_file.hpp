// Image files (PNG, JPEG, BMP, TGA, GIF's first frame) decoded into Image8,
// and resized: Debian's stb (stb_image, stb_image_resize), compiled into this
// one file. No LibTorch: part of gantry_base.
#pragma once

#include <string>

#include "gantry/core_export.hpp"
#include "io/png.hpp"

namespace gantry {

/// Decodes the image file at `path` into `channels` interleaved channels:
/// 1 (gray: RGB is converted with stb's weights 77/150/29 of 256) or 3 (RGB:
/// gray is repeated); 0 keeps the file's own (gray, gray+alpha -> 1; else 3;
/// alpha is dropped). Throws DataError naming the file and what was wrong.
GANTRY_CORE_EXPORT Image8 read_image_file(const std::string& path, int channels = 0);

/// `img` resized to `width` x `height` (stb_image_resize's defaults: Mitchell
/// when shrinking, Catmull-Rom when enlarging; edges clamped).
/// Returns `img` itself when the size already matches.
GANTRY_CORE_EXPORT Image8 resize_image(const Image8& img, int width, int height);

/// True for the file names read_image_file is meant for (.png, .jpg, .jpeg,
/// .bmp, .tga, .gif; any case).
GANTRY_CORE_EXPORT bool is_image_file_name(const std::string& name);

}  // namespace gantry
