#include "crc.hpp"

#include <array>

namespace gantry::wire {

namespace {

std::array<uint32_t, 256> make_table(uint32_t poly) {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ poly : c >> 1;
    t[i] = c;
  }
  return t;
}

uint32_t run(const std::array<uint32_t, 256>& t, const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const uint8_t*>(data);
  crc = ~crc;
  for (size_t i = 0; i < n; ++i) crc = t[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace

uint32_t crc32(const void* data, size_t n, uint32_t crc) {
  static const auto table = make_table(0xEDB88320u);
  return run(table, data, n, crc);
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
  static const auto table = make_table(0x82F63B78u);
  return run(table, data, n, crc);
}

}  // namespace gantry::wire
