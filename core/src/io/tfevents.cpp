#include "io/tfevents.hpp"

#include "io/clock.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#include "gantry/errors.hpp"
#include "wire/crc.hpp"

namespace gantry {

namespace {

// Minimal protobuf writer: varints, fixed 32/64-bit values, length-delimited fields.
struct Proto {
  std::string out;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      out.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    out.push_back(static_cast<char>(v));
  }
  void tag(int field, int wire_type) { varint(uint64_t(field) << 3 | uint64_t(wire_type)); }
  void f64(int field, double v) {
    tag(field, 1);
    out.append(reinterpret_cast<const char*>(&v), 8);
  }
  void f32(int field, float v) {
    tag(field, 5);
    out.append(reinterpret_cast<const char*>(&v), 4);
  }
  void i64(int field, int64_t v) {
    tag(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void bytes(int field, const std::string& s) {
    tag(field, 2);
    varint(s.size());
    out += s;
  }
  void packed_f64(int field, const std::vector<double>& v) {
    tag(field, 2);
    varint(v.size() * 8);
    out.append(reinterpret_cast<const char*>(v.data()), v.size() * 8);
  }
};

// The HParams plugin's summary: Summary.Value{tag, metadata{plugin_data{
// "hparams", HParamsPluginData bytes}}, tensor: an empty float (the plugin's
// NULL_TENSOR: TensorProto{dtype DT_FLOAT, tensor_shape{dim {}}})}.
std::string hparams_value(const std::string& tag, const std::string& plugin_data) {
  Proto plugin;
  plugin.bytes(1, "hparams");
  plugin.bytes(2, plugin_data);
  Proto metadata;
  metadata.bytes(1, plugin.out);
  Proto dim;  // one Dim with no fields
  Proto shape;
  shape.bytes(2, dim.out);
  Proto tensor;
  tensor.i64(1, 1);  // DT_FLOAT
  tensor.bytes(2, shape.out);
  Proto v;
  v.bytes(1, tag);
  v.bytes(9, metadata.out);
  v.bytes(8, tensor.out);
  return v.out;
}

// Event{wall_time=1, step=2, summary=5{value=1{tag=1, simple_value=2 | image=4}}}
std::string event_with_value(const std::string& value, int64_t step, double wall_time) {
  Proto summary;
  summary.bytes(1, value);
  Proto event;
  event.f64(1, wall_time);
  event.i64(2, step);
  event.bytes(5, summary.out);
  return event.out;
}

}  // namespace

TfEventsWriter::TfEventsWriter(const std::string& dir) : last_flush_(std::chrono::steady_clock::now()) {
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  const double now = unix_time();
  path_ =
      (std::filesystem::path(dir) / ("events.out.tfevents." + std::to_string(static_cast<int64_t>(now)) + "." + host))
          .string();
  file_ = std::fopen(path_.c_str(), "ab");
  if (!file_) throw Error("cannot create " + path_ + ": " + std::strerror(errno));
  Proto version;
  version.f64(1, now);
  version.bytes(3, "brain.Event:2");
  record(version.out);
  flush();
}

TfEventsWriter::~TfEventsWriter() {
  if (file_) std::fclose(file_);
}

void TfEventsWriter::record(const std::string& data) {
  const uint64_t len = data.size();
  const uint32_t len_crc = wire::masked_crc32c(&len, 8);
  const uint32_t data_crc = wire::masked_crc32c(data.data(), data.size());
  std::fwrite(&len, 8, 1, file_);
  std::fwrite(&len_crc, 4, 1, file_);
  std::fwrite(data.data(), 1, data.size(), file_);
  std::fwrite(&data_crc, 4, 1, file_);
  flush();  // one write per record: TensorBoard follows a live run within its reload interval
}

void TfEventsWriter::flush() {
  std::fflush(file_);
  last_flush_ = std::chrono::steady_clock::now();
}

void TfEventsWriter::scalar(const std::string& tag, double value, int64_t step, double wall_time) {
  Proto v;
  v.bytes(1, tag);
  v.f32(2, static_cast<float>(value));
  record(event_with_value(v.out, step, wall_time));
}

void TfEventsWriter::image(const std::string& tag, const std::string& png, int width, int height, int channels,
                           int64_t step, double wall_time) {
  Proto img;
  img.i64(1, height);
  img.i64(2, width);
  img.i64(3, channels);
  img.bytes(4, png);
  Proto v;
  v.bytes(1, tag);
  v.bytes(4, img.out);
  record(event_with_value(v.out, step, wall_time));
}

void TfEventsWriter::histogram(const std::string& tag, const Histogram& h, int64_t step, double wall_time) {
  Proto histo;  // HistogramProto{min 1, max 2, num 3, sum 4, sum_squares 5, bucket_limit 6, bucket 7}
  histo.f64(1, h.min);
  histo.f64(2, h.max);
  histo.f64(3, h.num);
  histo.f64(4, h.sum);
  histo.f64(5, h.sum_squares);
  histo.packed_f64(6, h.bucket_limit);
  histo.packed_f64(7, h.bucket);
  Proto v;
  v.bytes(1, tag);
  v.bytes(5, histo.out);
  record(event_with_value(v.out, step, wall_time));
}

void TfEventsWriter::hparams_start(const std::vector<HParam>& hparams, const std::string& group, double wall_time) {
  // SessionStartInfo{hparams 1: map<string, google.protobuf.Value>, group_name 4, start_time_secs 5};
  // Value{number_value 2, string_value 3, bool_value 4}; a map entry is {key 1, value 2}.
  Proto start;
  for (const auto& p : hparams) {
    Proto value;
    switch (p.kind) {
      case HParam::Kind::kNumber:
        value.f64(2, p.number);
        break;
      case HParam::Kind::kText:
        value.bytes(3, p.text);
        break;
      case HParam::Kind::kBool:
        value.i64(4, p.flag ? 1 : 0);
        break;
    }
    Proto entry;
    entry.bytes(1, p.name);
    entry.bytes(2, value.out);
    start.bytes(1, entry.out);
  }
  if (!group.empty()) start.bytes(4, group);
  start.f64(5, wall_time);
  Proto data;  // HParamsPluginData{version 1: 0, session_start_info 3}
  data.i64(1, 0);
  data.bytes(3, start.out);
  record(event_with_value(hparams_value("_hparams_/session_start_info", data.out), 0, wall_time));
}

void TfEventsWriter::hparams_end(bool ok, double wall_time) {
  Proto end;  // SessionEndInfo{status 1: STATUS_SUCCESS 1 / STATUS_FAILURE 2, end_time_secs 2}
  end.i64(1, ok ? 1 : 2);
  end.f64(2, wall_time);
  Proto data;  // HParamsPluginData{version 1: 0, session_end_info 4}
  data.i64(1, 0);
  data.bytes(4, end.out);
  record(event_with_value(hparams_value("_hparams_/session_end_info", data.out), 0, wall_time));
}

std::vector<std::string> read_tfrecords(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open " + path);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < b.size()) {
    uint64_t len = 0;
    uint32_t len_crc = 0, data_crc = 0;
    if (b.size() - pos < 12) throw Error(path + ": truncated record header at offset " + std::to_string(pos));
    std::memcpy(&len, b.data() + pos, 8);
    std::memcpy(&len_crc, b.data() + pos + 8, 4);
    if (wire::masked_crc32c(&len, 8) != len_crc)
      throw Error(path + ": bad length CRC at offset " + std::to_string(pos));
    if (len > b.size() - pos - 16) throw Error(path + ": truncated record at offset " + std::to_string(pos));
    std::memcpy(&data_crc, b.data() + pos + 12 + len, 4);
    if (wire::masked_crc32c(b.data() + pos + 12, len) != data_crc)
      throw Error(path + ": bad data CRC at offset " + std::to_string(pos));
    out.emplace_back(b, pos + 12, len);
    pos += 16 + len;
  }
  return out;
}

}  // namespace gantry
