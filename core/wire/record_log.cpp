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

namespace {

// Appends every whole, intact record at the start of bytes[0, n) to `out`;
// returns how many bytes they span (the rest is partial or corrupt).
size_t parse_records(const char* bytes, size_t n, std::vector<std::string>& out) {
  size_t pos = 0;
  while (n - pos >= 8) {
    uint32_t len = 0, crc = 0;
    std::memcpy(&len, bytes + pos, 4);
    std::memcpy(&crc, bytes + pos + 4, 4);
    if (len > kMaxFrame || len > n - pos - 8) break;
    if (crc32(bytes + pos + 8, len) != crc) break;
    out.emplace_back(bytes + pos + 8, len);
    pos += 8 + len;
  }
  return pos;
}

}  // namespace

Replay replay(const std::string& path) {
  Replay r;
  std::ifstream in(path, std::ios::binary);
  if (!in) return r;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  r.valid_bytes = parse_records(bytes.data(), bytes.size(), r.frames);
  r.torn_tail = r.valid_bytes != bytes.size();
  return r;
}

std::vector<std::string> RecordFollower::poll() {
  std::vector<std::string> frames;
  std::ifstream in(path_, std::ios::binary | std::ios::ate);
  if (!in) return frames;
  const auto size = static_cast<uint64_t>(in.tellg());
  if (size < offset_) {  // the file was cut (a resumed run drops a torn tail): read it again
    offset_ = 0;
    ++restarts_;
  }
  if (size == offset_) return frames;
  std::string bytes(size - offset_, '\0');
  in.seekg(static_cast<std::streamoff>(offset_));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  offset_ += parse_records(bytes.data(), bytes.size(), frames);
  return frames;
}

}  // namespace gantry::wire
