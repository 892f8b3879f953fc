// TensorBoard event files: TFRecord framing (length, masked CRC-32C of the
// length, data, masked CRC-32C of the data) around hand-encoded Event protos
// (scalars as simple_value, images as PNG). No protobuf, no LibTorch.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

class GANTRY_CORE_EXPORT TfEventsWriter {
 public:
  /// Creates `<dir>/events.out.tfevents.<unix time>.<host>` and writes the
  /// file_version record. Throws gantry::Error.
  explicit TfEventsWriter(const std::string& dir);
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  void scalar(const std::string& tag, double value, int64_t step, double wall_time);
  void image(const std::string& tag, const std::string& png, int width, int height, int channels, int64_t step,
             double wall_time);
  /// Hands buffered records to the OS (every record is flushed as written).
  void flush();
  const std::string& path() const { return path_; }

 private:
  void record(const std::string& event);
  std::FILE* file_ = nullptr;
  std::string path_;
  std::chrono::steady_clock::time_point last_flush_;
};

/// The Event protos of a TensorBoard file, for tests: verifies both CRCs of
/// every record and returns each record's data; throws gantry::Error naming
/// the offset of the first bad record.
GANTRY_CORE_EXPORT std::vector<std::string> read_tfrecords(const std::string& path);

}  // namespace gantry
