#include "record_log.hpp"

#include <cerrno>
#include <cstdio>
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

int RecordWriter::fd() const { return file_ ? ::fileno(file_) : -1; }

size_t encode_event_record(char* out, size_t cap, uint64_t seq, const char* kind, int64_t step, double wall_time,
                           const char* text) noexcept {
  // message.cpp's layout: 'G' 'W' version type(7 = Event) seq u32(payload length),
  // then the Event: str kind, i64 step, f64 wall_time, str text (str = u32 length + bytes).
  constexpr size_t kFrameHeader = 2 + 1 + 1 + 8 + 4, kRecordHeader = 8;
  const size_t kind_len = std::strlen(kind);
  size_t text_len = std::strlen(text);
  const size_t fixed = kRecordHeader + kFrameHeader + 4 + kind_len + 8 + 8 + 4;
  if (cap < fixed) return 0;
  if (text_len > cap - fixed) text_len = cap - fixed;
  const uint32_t payload = static_cast<uint32_t>(4 + kind_len + 8 + 8 + 4 + text_len);
  const uint32_t frame_len = static_cast<uint32_t>(kFrameHeader + payload);
  char* p = out + kRecordHeader;
  auto put = [&p](const void* v, size_t n) {
    std::memcpy(p, v, n);
    p += n;
  };
  const uint8_t head[4] = {'G', 'W', kProtocolVersion, 7};
  put(head, 4);
  put(&seq, 8);
  put(&payload, 4);
  const uint32_t kl = static_cast<uint32_t>(kind_len), tl = static_cast<uint32_t>(text_len);
  put(&kl, 4);
  put(kind, kind_len);
  put(&step, 8);
  put(&wall_time, 8);
  put(&tl, 4);
  put(text, text_len);
  const uint32_t crc = crc32(out + kRecordHeader, frame_len);
  std::memcpy(out, &frame_len, 4);
  std::memcpy(out + 4, &crc, 4);
  return kRecordHeader + frame_len;
}

namespace {

// Whether an intact record starts at bytes[pos]: a length that is not zero
// (no frame is empty; a run of zero bytes, what some file systems leave after
// a crash, is no record), fits the data and kMaxFrame, and a CRC that matches.
bool record_at(const char* bytes, size_t n, size_t pos, uint32_t& len) {
  if (n - pos < 8) return false;
  uint32_t crc = 0;
  std::memcpy(&len, bytes + pos, 4);
  std::memcpy(&crc, bytes + pos + 4, 4);
  return len > 0 && len <= kMaxFrame && len <= n - pos - 8 && crc32(bytes + pos + 8, len) == crc;
}

// Appends every intact record of bytes[0, n) to `out`, skipping damaged ones
// between intact records (each added to `corrupt`, offsets + `base`);
// returns the end of the last intact record (what follows is partial, or
// damaged with nothing intact after it).
size_t parse_records(const char* bytes, size_t n, std::vector<std::string>& out, std::vector<CorruptRegion>& corrupt,
                     uint64_t base) {
  size_t pos = 0, end = 0;
  while (n - pos >= 8) {
    uint32_t len = 0;
    if (record_at(bytes, n, pos, len)) {
      out.emplace_back(bytes + pos + 8, len);
      pos += 8 + len;
      end = pos;
      continue;
    }
    // Resynchronise: the next offset where an intact record starts. A false
    // match needs a length that fits and a matching CRC-32 (1 in 2^32).
    size_t next = pos + 1;
    while (n - next >= 8 && !record_at(bytes, n, next, len)) ++next;
    if (n - next < 8) break;  // nothing intact after it: a torn tail, or a record still being written
    corrupt.push_back({base + pos, next - pos});
    pos = next;
  }
  return end;
}

}  // namespace

std::string describe(const std::vector<CorruptRegion>& corrupt) {
  if (corrupt.empty()) return "";
  std::string s = std::to_string(corrupt.size()) + " damaged record" + (corrupt.size() == 1 ? "" : "s") + " skipped (";
  for (size_t i = 0; i < corrupt.size() && i < 3; ++i)
    s += (i ? ", " : "") + std::to_string(corrupt[i].bytes) + " bytes at offset " + std::to_string(corrupt[i].offset);
  return s + (corrupt.size() > 3 ? ", ...)" : ")");
}

Replay replay(const std::string& path) {
  Replay r;
  std::ifstream in(path, std::ios::binary);
  if (!in) return r;
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  r.valid_bytes = parse_records(bytes.data(), bytes.size(), r.frames, r.corrupt, 0);
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
    corrupt_.clear();
  }
  if (size == offset_) return frames;
  std::string bytes(size - offset_, '\0');
  in.seekg(static_cast<std::streamoff>(offset_));
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  bytes.resize(static_cast<size_t>(in.gcount()));
  offset_ += parse_records(bytes.data(), bytes.size(), frames, corrupt_, offset_);
  return frames;
}

}  // namespace gantry::wire
