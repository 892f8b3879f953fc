#include "io/png.hpp"

#include <zlib.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace gantry {

namespace {

constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};

void put_u32(std::string& out, uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

uint32_t get_u32(const unsigned char* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

void put_chunk(std::string& out, const char type[4], const std::string& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  std::string body(type, 4);
  body += data;
  out += body;
  put_u32(out, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()), body.size())));
}

int color_type(int channels) {
  switch (channels) {
    case 1:
      return 0;
    case 3:
      return 2;
    case 4:
      return 6;
    default:
      throw std::invalid_argument("PNG: channels must be 1, 3 or 4");
  }
}

}  // namespace

std::string encode_png(const Image8& img) {
  const int ct = color_type(img.channels);
  const size_t row = static_cast<size_t>(img.width) * img.channels;
  if (img.width <= 0 || img.height <= 0 || img.pixels.size() != row * img.height)
    throw std::invalid_argument("PNG: pixel buffer does not match width x height x channels");
  std::string raw;
  raw.reserve((row + 1) * img.height);
  for (int y = 0; y < img.height; ++y) {
    raw.push_back('\0');  // filter: none
    raw.append(reinterpret_cast<const char*>(img.pixels.data() + y * row), row);
  }
  uLongf zlen = compressBound(raw.size());
  std::string z(zlen, '\0');
  if (compress2(reinterpret_cast<Bytef*>(z.data()), &zlen, reinterpret_cast<const Bytef*>(raw.data()), raw.size(), 6) !=
      Z_OK)
    throw std::runtime_error("PNG: zlib compression failed");
  z.resize(zlen);

  std::string out(reinterpret_cast<const char*>(kSignature), 8);
  std::string ihdr;
  put_u32(ihdr, static_cast<uint32_t>(img.width));
  put_u32(ihdr, static_cast<uint32_t>(img.height));
  ihdr += {8, static_cast<char>(ct), 0, 0, 0};  // depth, color type, deflate, filter, no interlace
  put_chunk(out, "IHDR", ihdr);
  put_chunk(out, "IDAT", z);
  put_chunk(out, "IEND", "");
  return out;
}

Image8 decode_png(const std::string& bytes) {
  auto fail = [](const std::string& why) { throw std::runtime_error("PNG: " + why); };
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  if (bytes.size() < 8 || std::memcmp(p, kSignature, 8) != 0) fail("bad signature");
  Image8 img;
  std::string z;
  size_t pos = 8;
  bool ended = false;
  while (!ended) {
    if (pos + 12 > bytes.size()) fail("truncated chunk");
    const uint32_t len = get_u32(p + pos);
    if (len > bytes.size() - pos - 12) fail("chunk length past the end");
    const std::string type(bytes.data() + pos + 4, 4);
    const unsigned char* data = p + pos + 8;
    if (crc32(0, p + pos + 4, len + 4) != get_u32(data + len)) fail("CRC mismatch in " + type);
    if (type == "IHDR") {
      if (len != 13) fail("bad IHDR");
      img.width = static_cast<int>(get_u32(data));
      img.height = static_cast<int>(get_u32(data + 4));
      if (data[8] != 8 || data[12] != 0) fail("only 8-bit, non-interlaced images are supported");
      img.channels = data[9] == 0 ? 1 : data[9] == 2 ? 3 : data[9] == 6 ? 4 : 0;
      if (!img.channels) fail("unsupported color type");
      if (img.width <= 0 || img.height <= 0 || img.width > 1 << 15 || img.height > 1 << 15) fail("implausible size");
    } else if (type == "IDAT") {
      z.append(reinterpret_cast<const char*>(data), len);
    } else if (type == "IEND") {
      ended = true;
    }
    pos += 12 + len;
  }
  if (!img.channels) fail("no IHDR");
  const size_t row = static_cast<size_t>(img.width) * img.channels;
  std::string raw((row + 1) * img.height, '\0');
  uLongf rawlen = raw.size();
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &rawlen, reinterpret_cast<const Bytef*>(z.data()), z.size()) !=
          Z_OK ||
      rawlen != raw.size())
    fail("corrupt image data");
  img.pixels.resize(row * img.height);
  const int bpp = img.channels;
  for (int y = 0; y < img.height; ++y) {
    const auto filter = static_cast<unsigned char>(raw[y * (row + 1)]);
    const auto* in = reinterpret_cast<const unsigned char*>(raw.data()) + y * (row + 1) + 1;
    uint8_t* out = img.pixels.data() + y * row;
    const uint8_t* up = y ? out - row : nullptr;
    for (size_t x = 0; x < row; ++x) {
      const int a = x >= size_t(bpp) ? out[x - bpp] : 0;
      const int b = up ? up[x] : 0;
      const int c = (up && x >= size_t(bpp)) ? up[x - bpp] : 0;
      int pred = 0;
      switch (filter) {
        case 0:
          pred = 0;
          break;
        case 1:
          pred = a;
          break;
        case 2:
          pred = b;
          break;
        case 3:
          pred = (a + b) / 2;
          break;
        case 4: {
          const int pa = std::abs(b - c), pb = std::abs(a - c), pc = std::abs(a + b - 2 * c);
          pred = (pa <= pb && pa <= pc) ? a : (pb <= pc ? b : c);
          break;
        }
        default:
          fail("bad filter type");
      }
      out[x] = static_cast<uint8_t>(in[x] + pred);
    }
  }
  return img;
}

}  // namespace gantry
