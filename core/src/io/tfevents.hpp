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
  /// A histogram (TensorBoard's HistogramProto): `bucket_limit` the buckets'
  /// right edges, `bucket` their counts, with the values' min, max, count,
  /// sum and sum of squares.
  struct Histogram {
    double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
    std::vector<double> bucket_limit, bucket;
  };
  void histogram(const std::string& tag, const Histogram& h, int64_t step, double wall_time);
  /// One value of the run's hyperparameters (TensorBoard's HParams).
  struct HParam {
    std::string name;
    enum class Kind { kNumber, kText, kBool } kind = Kind::kText;
    double number = 0;
    std::string text;
    bool flag = false;
  };
  /// The HParams plugin's session start (the run's hyperparameters; the
  /// plugin takes the run's scalars as its metrics) and end (`ok`: success,
  /// else failure), as torch.utils.tensorboard's add_hparams writes them.
  void hparams_start(const std::vector<HParam>& hparams, const std::string& group, double wall_time);
  void hparams_end(bool ok, double wall_time);
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
