// A reader written from the first text of docs/protocol.md (protocol 1.0)
// alone, as a third-party client would write it, sharing no code with
// core/wire: the 16-byte header, the 1.0 payloads, and the first text's rule
// that bytes left over after a payload's last field are an error. A server
// that keeps its word serves such a client (a Hello without a minor) frames
// it decodes whole.
#pragma once

#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

namespace gantry::test::strict_1_0 {

struct Frame {
  uint8_t type = 0;
  uint64_t seq = 0;
  // RankStatus (type 6) in 1.0: rank, host, step, samples/s, RSS, wall time.
  uint32_t rank = 0;
  std::string host;
  int64_t step = 0;
  // Welcome (type 2): the next seq.
  uint64_t next_seq = 0;
};

class Bytes {
 public:
  Bytes(const std::string& s, size_t from, size_t to) : s_(s), at_(from), end_(to) {}
  template <typename T>
  T get(const char* what) {
    if (end_ - at_ < sizeof(T)) throw std::runtime_error(std::string("1.0: truncated at ") + what);
    T v;
    std::memcpy(&v, s_.data() + at_, sizeof v);
    at_ += sizeof v;
    return v;
  }
  std::string str(const char* what) {
    const uint32_t n = get<uint32_t>(what);
    if (end_ - at_ < n) throw std::runtime_error(std::string("1.0: truncated at ") + what);
    std::string out = s_.substr(at_, n);
    at_ += n;
    return out;
  }
  void skip(size_t n, const char* what) {
    if (end_ - at_ < n) throw std::runtime_error(std::string("1.0: truncated at ") + what);
    at_ += n;
  }
  void done(const char* type) const {
    if (at_ != end_)
      throw std::runtime_error(std::string("1.0: ") + std::to_string(end_ - at_) + " bytes left over after " + type);
  }

 private:
  const std::string& s_;
  size_t at_, end_;
};

inline Frame decode(const std::string& f) {
  if (f.size() < 16 || f[0] != 'G' || f[1] != 'W' || f[2] != 1) throw std::runtime_error("1.0: bad header");
  Frame out;
  out.type = static_cast<uint8_t>(f[3]);
  std::memcpy(&out.seq, f.data() + 4, 8);
  uint32_t n = 0;
  std::memcpy(&n, f.data() + 12, 4);
  if (n != f.size() - 16) throw std::runtime_error("1.0: length does not match");
  Bytes b(f, 16, f.size());
  switch (out.type) {
    case 1:  // Hello
      b.get<uint32_t>("version"), b.str("token"), b.get<uint64_t>("last_seq");
      b.done("Hello");
      break;
    case 2:  // Welcome
      b.get<uint32_t>("version"), b.str("run_name"), out.next_seq = b.get<uint64_t>("next_seq");
      b.done("Welcome");
      break;
    case 3:  // RunInfo
      for (const char* s : {"name", "plugin", "plugin_version", "manifest", "config_yaml"}) b.str(s);
      b.get<uint32_t>("world_size"), b.get<uint32_t>("num_nodes"), b.get<double>("start_time");
      b.done("RunInfo");
      break;
    case 4: {  // Scalars
      const uint32_t count = b.get<uint32_t>("count");
      for (uint32_t i = 0; i < count; ++i)
        b.get<int64_t>("step"), b.get<double>("wall"), b.str("name"), b.get<double>("v");
      b.done("Scalars");
      break;
    }
    case 5:  // Image
      b.str("tag"), b.get<int64_t>("step"), b.get<double>("wall"), b.get<uint32_t>("w"), b.get<uint32_t>("h");
      b.str("png");
      b.done("Image");
      break;
    case 6:  // RankStatus
      out.rank = b.get<uint32_t>("rank");
      out.host = b.str("host");
      out.step = b.get<int64_t>("step");
      b.skip(3 * 8, "samples_per_s, rss_mib, wall_time");
      b.done("RankStatus");
      break;
    case 7:  // Event
      b.str("kind"), b.get<int64_t>("step"), b.get<double>("wall"), b.str("text");
      b.done("Event");
      break;
    default:
      throw std::runtime_error("1.0: unknown type " + std::to_string(out.type));
  }
  return out;
}

}  // namespace gantry::test::strict_1_0
