#include "record_log.hpp"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>
#include <stdexcept>

#include "crc.hpp"
#include "message.hpp"

namespace gantry::wire {

RecordWriter::RecordWriter(const std::string& path) : path_(path) {
  file_ = std::fopen(path.c_str(), "ab");
  if (!file_) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
}

RecordWriter::~RecordWriter() {
  if (file_) std::fclose(file_);
}

void RecordWriter::append(const std::string& frame) {
  const uint32_t len = static_cast<uint32_t>(frame.size());
  const uint32_t crc = crc32(frame.data(), frame.size());
  if (std::fwrite(&len, 4, 1, file_) != 1 || std::fwrite(&crc, 4, 1, file_) != 1 ||
      std::fwrite(frame.data(), 1, frame.size(), file_) != frame.size() || std::fflush(file_) != 0)
    throw std::runtime_error("cannot append to " + path_ + ": " + std::strerror(errno));
}

Replay replay(const std::string& path) {
  Replay r;
  std::ifstream in(path, std::ios::binary);
  if (!in) return r;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  size_t pos = 0;
  while (pos < bytes.size()) {
    uint32_t len = 0, crc = 0;
    if (bytes.size() - pos < 8) break;
    std::memcpy(&len, bytes.data() + pos, 4);
    std::memcpy(&crc, bytes.data() + pos + 4, 4);
    if (len > kMaxFrame || len > bytes.size() - pos - 8) break;
    if (crc32(bytes.data() + pos + 8, len) != crc) break;
    r.frames.emplace_back(bytes, pos + 8, len);
    pos += 8 + len;
  }
  r.valid_bytes = pos;
  r.torn_tail = pos != bytes.size();
  return r;
}

}  // namespace gantry::wire
