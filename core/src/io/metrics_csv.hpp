// metrics.csv: one row per logged step and kind (step, epoch, wall_time,
// kind, then every metric by name). `kind` says what wrote the row: `train`
// (the training rows, what log_samples logs joins them), `val` (a validation
// pass), `score` (the sample-quality score), so a step has at most one row of
// each kind: a second write of the same step and kind is merged into the
// first. Like Lightning's CSVLogger, a metric that first appears later adds a
// column at the end (the file is rewritten once with the wider header); a
// resumed run keeps its column order, also in a new run directory (the
// checkpoint holds it: columns()).
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
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
  /// Opens `path` for appending; an existing file's header is kept (resume;
  /// a file of a version without `kind` gets the column, empty in its rows).
  /// `columns`: a new file's metric columns, in order (a resumed run's).
  /// `drop_after`: an existing file's rows after this step are dropped (a
  /// resumed run redoes them: no duplicates).
  /// `partial_at_drop`: the `train` row at that step is dropped too (the
  /// run stopped between two log steps and wrote a partial row there; the
  /// checkpoint kept its values, which the resumed run's next row holds).
  explicit MetricsCsv(std::string path, std::vector<std::string> columns = {}, int64_t drop_after = INT64_MAX,
                      bool partial_at_drop = false);
  ~MetricsCsv();
  MetricsCsv(const MetricsCsv&) = delete;
  MetricsCsv& operator=(const MetricsCsv&) = delete;

  /// Appends a row and hands it to the OS. `wall_time`: seconds since the
  /// Unix epoch. A row of the same step and kind as the last of that kind is
  /// merged into it (its new values win).
  void write(int64_t step, int64_t epoch, double wall_time, const std::string& kind,
             const std::vector<std::pair<std::string, double>>& values);
  /// Flushes buffered rows to the OS.
  void flush();
  /// The metric columns, in file order (after step, epoch, wall_time, kind).
  const std::vector<std::string>& columns() const { return columns_; }

  /// The constructor's drop: rows after the resumed step (a resume from an
  /// earlier checkpoint of a run that went further) and the last step they had.
  int64_t dropped_rows() const { return dropped_rows_; }
  int64_t dropped_to_step() const { return dropped_to_step_; }

 private:
  struct Row {
    std::map<std::string, std::string> cells;  // by column name
  };
  // Rewrites the file with `columns`, keeping the rows up to step
  // `keep_up_to`, with `merge` (if not null) merged into the row of its step
  // and kind.
  void rewrite(const std::vector<std::string>& columns, int64_t keep_up_to, const Row* merge);
  std::string line_of(const Row& row) const;
  void reopen();

  std::string path_;
  std::FILE* file_ = nullptr;
  std::vector<std::string> columns_;          // metric columns after step, epoch, wall_time, kind
  std::map<std::string, int64_t> last_step_;  // kind -> the step of its last row
  int64_t drop_train_at_ = -1;                // the constructor's rewrite: this step's train row goes
  int64_t dropped_rows_ = 0, dropped_to_step_ = -1;
};

}  // namespace gantry
