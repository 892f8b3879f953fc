#include "message.hpp"

#include <cstring>
#include <type_traits>
#include <utility>
#include <variant>

namespace gantry::wire {

namespace {

constexpr size_t kHeader = 2 + 1 + 1 + 8 + 4;
constexpr uint32_t kMaxString = 32u << 20;
constexpr uint32_t kMaxPoints = 1u << 22;

class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { raw(&v, 4); }
  void u64(uint64_t v) { raw(&v, 8); }
  void i64(int64_t v) { raw(&v, 8); }
  void f64(double v) { raw(&v, 8); }
  void str(const std::string& s) {
    if (s.size() > kMaxString) throw WireError("string of " + std::to_string(s.size()) + " bytes is too long");
    u32(static_cast<uint32_t>(s.size()));
    out_ += s;
  }
  std::string take() { return std::move(out_); }

 private:
  void raw(const void* p, size_t n) {  // little-endian hosts only (x86-64, arm64)
    out_.append(static_cast<const char*>(p), n);
  }
  std::string out_;
};

class Reader {
 public:
  Reader(const uint8_t* p, size_t n) : p_(p), n_(n) {}
  uint8_t u8(const char* what) { return *take(1, what); }
  uint32_t u32(const char* what) { return get<uint32_t>(what); }
  uint64_t u64(const char* what) { return get<uint64_t>(what); }
  int64_t i64(const char* what) { return get<int64_t>(what); }
  double f64(const char* what) { return get<double>(what); }
  std::string str(const char* what) {
    const uint32_t len = u32(what);
    if (len > kMaxString) throw WireError(std::string(what) + ": string length " + std::to_string(len) + " too large");
    const uint8_t* s = take(len, what);
    return std::string(reinterpret_cast<const char*>(s), len);
  }
  bool at_end() const { return pos_ == n_; }
  // After the last field this version knows: bytes left over are fields a
  // newer writer appended (same protocol version); a reader skips them.
  void skip_appended() { pos_ = n_; }

 private:
  template <class T>
  T get(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof v, what), sizeof v);
    return v;
  }
  const uint8_t* take(size_t k, const char* what) {
    if (k > n_ - pos_) throw WireError(std::string("truncated at ") + what);
    const uint8_t* at = p_ + pos_;
    pos_ += k;
    return at;
  }
  const uint8_t* p_;
  size_t n_, pos_ = 0;
};

// Each message's fields in order; `minor` leaves out what a later minor appended.
void put(Writer& w, const Hello& m, uint32_t minor) {
  w.u32(m.protocol_version);
  w.str(m.token);
  w.u64(m.last_seq);
  if (minor >= 5) w.u32(m.minor);
}
void put(Writer& w, const Welcome& m, uint32_t minor) {
  w.u32(m.protocol_version);
  w.str(m.run_name);
  w.u64(m.next_seq);
  if (minor < 5) return;
  w.u32(m.minor);
  w.str(m.run_dir);
}
void put(Writer& w, const RunInfo& m, uint32_t minor) {
  w.str(m.name);
  w.str(m.plugin);
  w.str(m.plugin_version);
  w.str(m.manifest);
  w.str(m.config_yaml);
  w.u32(m.world_size);
  w.u32(m.num_nodes);
  w.f64(m.start_time);
  if (minor >= 1) w.i64(m.total_steps);
  if (minor >= 5) w.u32(m.protocol_minor);
}
void put(Writer& w, const Scalars& m, uint32_t) {
  if (m.points.size() > kMaxPoints) throw WireError("too many scalars in one batch");
  w.u32(static_cast<uint32_t>(m.points.size()));
  for (const auto& s : m.points) {
    w.i64(s.step);
    w.f64(s.wall_time);
    w.str(s.name);
    w.f64(s.value);
  }
}
void put(Writer& w, const Image& m, uint32_t) {
  w.str(m.tag);
  w.i64(m.step);
  w.f64(m.wall_time);
  w.u32(m.width);
  w.u32(m.height);
  w.str(m.png);
}
void put(Writer& w, const RankStatus& m, uint32_t minor) {
  w.u32(m.rank);
  w.str(m.host);
  w.i64(m.step);
  w.f64(m.samples_per_s);
  w.f64(m.rss_mib);
  w.f64(m.wall_time);
  if (minor < 2) return;
  for (double v : {m.step_ms, m.data_ms, m.compute_ms, m.comm_ms, m.optimizer_ms, m.other_ms, m.cpu_pct, m.gpu_util_pct,
                   m.gpu_mem_mib, m.gpu_power_w})
    w.f64(v);
  w.u8(m.straggler ? 1 : 0);
  if (minor >= 3) w.f64(m.last_pct);
  if (minor >= 4) w.f64(m.link_ms);
}
void put(Writer& w, const Event& m, uint32_t) {
  w.str(m.kind);
  w.i64(m.step);
  w.f64(m.wall_time);
  w.str(m.text);
}

// Each message's fields in the order put() writes them; appended fields
// (added within protocol version 1) are optional: absent from an older
// writer's frames. What a newer writer appended after them is skipped.
void get(Reader& r, Hello& m) {
  m.protocol_version = r.u32("Hello.protocol_version");
  m.token = r.str("Hello.token");
  m.last_seq = r.u64("Hello.last_seq");
  m.minor = r.at_end() ? 0 : r.u32("Hello.minor");
}
void get(Reader& r, Welcome& m) {
  m.protocol_version = r.u32("Welcome.protocol_version");
  m.run_name = r.str("Welcome.run_name");
  m.next_seq = r.u64("Welcome.next_seq");
  if (r.at_end()) {
    m.minor = 0;
    return;
  }
  m.minor = r.u32("Welcome.minor");
  m.run_dir = r.str("Welcome.run_dir");
}
void get(Reader& r, RunInfo& m) {
  m.name = r.str("RunInfo.name");
  m.plugin = r.str("RunInfo.plugin");
  m.plugin_version = r.str("RunInfo.plugin_version");
  m.manifest = r.str("RunInfo.manifest");
  m.config_yaml = r.str("RunInfo.config_yaml");
  m.world_size = r.u32("RunInfo.world_size");
  m.num_nodes = r.u32("RunInfo.num_nodes");
  m.start_time = r.f64("RunInfo.start_time");
  if (!r.at_end()) m.total_steps = r.i64("RunInfo.total_steps");  // appended
  m.protocol_minor = r.at_end() ? 0 : r.u32("RunInfo.protocol_minor");
}
void get(Reader& r, Scalars& m) {
  const uint32_t n = r.u32("Scalars.count");
  if (n > kMaxPoints) throw WireError("Scalars.count " + std::to_string(n) + " too large");
  for (uint32_t i = 0; i < n; ++i) {
    Scalar s;
    s.step = r.i64("Scalar.step");
    s.wall_time = r.f64("Scalar.wall_time");
    s.name = r.str("Scalar.name");
    s.value = r.f64("Scalar.value");
    m.points.push_back(std::move(s));
  }
}
void get(Reader& r, Image& m) {
  m.tag = r.str("Image.tag");
  m.step = r.i64("Image.step");
  m.wall_time = r.f64("Image.wall_time");
  m.width = r.u32("Image.width");
  m.height = r.u32("Image.height");
  m.png = r.str("Image.png");
}
void get(Reader& r, RankStatus& m) {
  m.rank = r.u32("RankStatus.rank");
  m.host = r.str("RankStatus.host");
  m.step = r.i64("RankStatus.step");
  m.samples_per_s = r.f64("RankStatus.samples_per_s");
  m.rss_mib = r.f64("RankStatus.rss_mib");
  m.wall_time = r.f64("RankStatus.wall_time");
  if (r.at_end()) return;  // appended from here
  for (double* v : {&m.step_ms, &m.data_ms, &m.compute_ms, &m.comm_ms, &m.optimizer_ms, &m.other_ms, &m.cpu_pct,
                    &m.gpu_util_pct, &m.gpu_mem_mib, &m.gpu_power_w})
    *v = r.f64("RankStatus.parts");
  const uint8_t straggler = r.u8("RankStatus.straggler");
  if (straggler > 1) throw WireError("RankStatus.straggler is " + std::to_string(straggler) + " (0 or 1)");
  m.straggler = straggler == 1;
  if (!r.at_end()) m.last_pct = r.f64("RankStatus.last_pct");
  if (!r.at_end()) m.link_ms = r.f64("RankStatus.link_ms");
}
void get(Reader& r, Event& m) {
  m.kind = r.str("Event.kind");
  m.step = r.i64("Event.step");
  m.wall_time = r.f64("Event.wall_time");
  m.text = r.str("Event.text");
}

// Type t (1-based, the Payload's alternatives in order) read from `r`.
template <size_t... I>
Payload get_payload(uint8_t type, Reader& r, std::index_sequence<I...>) {
  Payload out;
  const bool known = ((type == I + 1 ? (
                                           out =
                                               [&] {
                                                 std::variant_alternative_t<I, Payload> m;
                                                 get(r, m);
                                                 r.skip_appended();
                                                 return m;
                                               }(),
                                           true)
                                     : false) ||
                      ...);
  if (!known) throw WireError("unknown message type " + std::to_string(type));
  return out;
}
Payload get_payload(uint8_t type, Reader& r) {
  return get_payload(type, r, std::make_index_sequence<std::variant_size_v<Payload>>{});
}

}  // namespace

const char* type_name(const Payload& p) {
  static const char* kNames[] = {"Hello", "Welcome", "RunInfo", "Scalars", "Image", "RankStatus", "Event"};
  return kNames[p.index()];
}

std::string encode(const Message& m, uint32_t minor) {
  Writer body;
  std::visit([&](const auto& x) { put(body, x, minor); }, m.payload);
  const std::string payload = body.take();
  if (payload.size() + kHeader > kMaxFrame)
    throw WireError("frame of " + std::to_string(payload.size()) + " bytes is too large");
  Writer w;
  w.u8('G');
  w.u8('W');
  w.u8(kProtocolVersion);
  w.u8(static_cast<uint8_t>(m.payload.index() + 1));
  w.u64(m.seq);
  w.u32(static_cast<uint32_t>(payload.size()));
  return w.take() + payload;
}

Message decode(const void* data, size_t size) {
  if (size > kMaxFrame) throw WireError("frame of " + std::to_string(size) + " bytes is too large");
  Reader r(static_cast<const uint8_t*>(data), size);
  if (r.u8("magic") != 'G' || r.u8("magic") != 'W') throw WireError("not a gantry frame (bad magic)");
  const uint8_t version = r.u8("version");
  if (version != kProtocolVersion)
    throw WireError("protocol version " + std::to_string(version) + ", this side speaks " +
                    std::to_string(kProtocolVersion));
  const uint8_t type = r.u8("type");
  Message m;
  m.seq = r.u64("seq");
  const uint32_t len = r.u32("length");
  if (len != size - kHeader)
    throw WireError("length field says " + std::to_string(len) + " bytes, the frame has " +
                    std::to_string(size - kHeader));
  Reader body(static_cast<const uint8_t*>(data) + kHeader, len);
  m.payload = get_payload(type, body);
  return m;
}

std::string for_minor(const std::string& frame, uint32_t minor) {
  return minor >= kProtocolMinor ? frame : encode(decode(frame), minor);
}

}  // namespace gantry::wire
