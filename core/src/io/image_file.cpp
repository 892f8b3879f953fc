#include "io/image_file.hpp"

#include <algorithm>
#include <cctype>
#include <memory>

#include "gantry/errors.hpp"

// stb's implementations, private to this file (static functions: nothing
// clashes with another copy of stb in the process, e.g. gantry-view's).
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wsign-compare"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#pragma GCC diagnostic ignored "-Wshadow"
#pragma GCC diagnostic ignored "-Wdouble-promotion"
#pragma GCC diagnostic ignored "-Wconversion"
#pragma GCC diagnostic ignored "-Wold-style-cast"
#pragma GCC diagnostic ignored "-Wcast-qual"
#pragma GCC diagnostic ignored "-Wuseless-cast"
#endif
#define STB_IMAGE_STATIC
#define STB_IMAGE_IMPLEMENTATION
#define STBI_NO_HDR
#define STBI_NO_LINEAR
#define STBI_FAILURE_USERMSG
#include <stb/stb_image.h>
#define STB_IMAGE_RESIZE_STATIC
#define STB_IMAGE_RESIZE_IMPLEMENTATION
#include <stb/stb_image_resize.h>
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

namespace gantry {

Image8 read_image_file(const std::string& path, int channels) {
  if (channels != 0 && channels != 1 && channels != 3)
    throw DataError(path + ": images can be read as 1 or 3 channels, not " + std::to_string(channels));
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DataError(path + ": cannot open");
  int w = 0, h = 0, in_channels = 0;
  if (!stbi_info_from_file(f, &w, &h, &in_channels)) {
    const char* why = stbi_failure_reason();
    std::fclose(f);
    throw DataError(path + ": not an image stb can read (" + (why ? why : "unknown format") + ")");
  }
  if (int64_t(w) * h > (int64_t(1) << 28)) {
    std::fclose(f);
    throw DataError(path + ": " + std::to_string(w) + "x" + std::to_string(h) + " pixels is too large");
  }
  const int want = channels ? channels : (in_channels <= 2 ? 1 : 3);
  std::unique_ptr<stbi_uc, void (*)(void*)> px(stbi_load_from_file(f, &w, &h, &in_channels, want), stbi_image_free);
  std::fclose(f);
  if (!px) {
    const char* why = stbi_failure_reason();
    throw DataError(path + ": cannot decode (" + (why ? why : "corrupt or truncated") + ")");
  }
  Image8 img;
  img.width = w;
  img.height = h;
  img.channels = want;
  img.pixels.assign(px.get(), px.get() + size_t(w) * size_t(h) * size_t(want));
  return img;
}

Image8 resize_image(const Image8& img, int width, int height) {
  if (img.width == width && img.height == height) return img;
  Image8 out;
  out.width = width;
  out.height = height;
  out.channels = img.channels;
  out.pixels.resize(size_t(width) * size_t(height) * size_t(img.channels));
  if (!stbir_resize_uint8(img.pixels.data(), img.width, img.height, 0, out.pixels.data(), width, height, 0,
                          img.channels))
    throw DataError("cannot resize a " + std::to_string(img.width) + "x" + std::to_string(img.height) + " image to " +
                    std::to_string(width) + "x" + std::to_string(height));
  return out;
}

bool is_image_file_name(const std::string& name) {
  const auto dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  std::string ext = name.substr(dot + 1);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == "png" || ext == "jpg" || ext == "jpeg" || ext == "bmp" || ext == "tga" || ext == "gif";
}

}  // namespace gantry
