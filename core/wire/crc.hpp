// CRC-32 (IEEE, as zlib) and CRC-32C (Castagnoli, as TFRecord), table-driven.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gantry::wire {

/// CRC-32 (polynomial 0xEDB88320), continuing from `crc` (0 to start).
uint32_t crc32(const void* data, size_t n, uint32_t crc = 0);
/// CRC-32C (polynomial 0x82F63B78), continuing from `crc` (0 to start).
uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
/// TFRecord's masked CRC-32C.
inline uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

}  // namespace gantry::wire
