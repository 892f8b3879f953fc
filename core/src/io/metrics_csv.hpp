// metrics.csv: one row per logged step (step, epoch, wall_time, then every
// metric by name). Like Lightning's CSVLogger, a metric that first appears
// later adds a column: the file is rewritten once with the wider header.
#pragma once

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "gantry/core_export.hpp"

namespace gantry {

/// The fields of one line split at `sep` (a trailing separator ends with an
/// empty field). metrics.csv has no quoting: names and values hold no commas.
GANTRY_CORE_EXPORT std::vector<std::string> split_csv_line(const std::string& line, char sep = ',');

class GANTRY_CORE_EXPORT MetricsCsv {
 public:
  /// Opens `path` for appending; an existing file's header is kept (resume).
  explicit MetricsCsv(std::string path);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  /// Appends a row and hands it to the OS. `wall_time`: seconds since the Unix epoch.
  void write(int64_t step, int64_t epoch, double wall_time, const std::vector<std::pair<std::string, double>>& values);
  /// Drops the rows after `step` (a resumed run redoes them: no duplicates).
  void truncate_after(int64_t step);
  /// Flushes buffered rows to the OS.
  void flush();

 private:
  void rewrite_with_columns(const std::vector<std::string>& columns);

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> columns_;  // metric columns after step, epoch, wall_time
};

}  // namespace gantry
