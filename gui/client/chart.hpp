// The chart maths both GUIs paint (gantry-monitor with Qt, gantry-view with
// ImGui), once: which metrics of which runs make a chart, its ranges and
// ticks, the decimated (and smoothed) lines with their colours and labels,
// and the hover read-out. No Qt, no ImGui (tests/client_test.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "series.hpp"

namespace gantry::client {

/// One run as the charts see it.
struct ChartRun {
  std::string name;                                       ///< legend label when several runs are shown
  const std::map<std::string, Series>* series = nullptr;  ///< its metrics by name
  bool visible = true;
  double start_time = 0;  ///< Unix seconds: x = 0 of XAxis::kRelative
};

/// What x is: the global step, seconds since the run's start, or wall time (Unix seconds).
enum class XAxis { kStep, kRelative, kWall };

struct ChartOptions {
  double smoothing = 0;  ///< TensorBoard's EMA weight, [0, 1): 0 is none
  bool log_y = false;    ///< y on a log10 scale (values <= 0 are not drawn)
  int columns = 600;     ///< pixel columns of the plot area: decimation keeps ~2 points per column
  XAxis x = XAxis::kStep;
  bool zoomed = false;  ///< show x in [x_lo, x_hi] (x units) instead of everything
  double x_lo = 0, x_hi = 1;
};

/// One drawn line: a metric of a run.
struct ChartLine {
  size_t run = 0;  ///< index into the runs given
  std::string metric;
  std::string label;         ///< "g_loss", or "<run>: g_loss" when several runs are shown
  uint32_t color = 0;        ///< 0xRRGGBB: per metric for one run; per run for several (its 2nd, 3rd metric lighter)
  std::vector<double> x, y;  ///< the raw points to draw, x in the chart's x units (decimated; y finite, > 0 with log_y)
  std::vector<double> sx, sy;  ///< the smoothed line (empty when smoothing is 0)
  /// Draw each raw point as a dot too: a sparse line (a validation metric
  /// logged once is one point, which a line alone does not show).
  bool markers = false;
};

/// A line with at most this many drawn points gets markers.
inline constexpr size_t kMarkerPoints = 16;

/// A range and its ticks at round values. For y with log_y: in log10 units.
struct ChartAxis {
  double lo = 0, hi = 1;
  std::vector<double> ticks;
};

struct Chart {
  std::string group;
  bool log_y = false;
  ChartAxis x, y;
  std::vector<ChartLine> lines;
  /// A value in the y axis' units (log10 with log_y).
  double to_axis(double value) const;
  /// A y tick's label: the value it stands for ("%.3g").
  std::string y_label(double tick) const;
};

/// The charts of the visible runs' metrics (metric_group), sorted by name.
std::vector<std::string> chart_groups(const std::vector<ChartRun>& runs);

/// Builds charts, keeping each line's smoothing and decimation state between
/// frames (a growing series costs only its new points).
class ChartModel {
 public:
  /// `group`'s chart over the visible runs: x from the first to the last
  /// point of any of its lines (or the zoom), y over what is drawn inside
  /// that x range (+5% padding; a point beyond each edge is kept so lines
  /// reach the border).
  Chart build(const std::vector<ChartRun>& runs, const std::string& group, const ChartOptions& opt);
  /// The hover read-out at `at` (x units): "step N" then a line per drawn line,
  /// its nearest point's value and smoothed value. "" when nothing is near.
  std::string readout(const std::vector<ChartRun>& runs, const Chart& chart, double at) const;

 private:
  struct Cache {
    Smoother smoother;
    Decimator raw, smooth;
  };
  std::map<std::pair<std::string, std::string>, Cache> cache_;  // (run, metric)
  XAxis x_kind_ = XAxis::kStep;                                 // of the last chart built (the read-out's x)
};

/// The flattened keys ("trainer.max_epochs") whose values differ between the
/// given configs (resolved YAML, as RunInfo carries it), or are missing from
/// some: what tells a sweep's runs apart (`name`, `trainer.out_dir`,
/// `trainer.resume` and `monitor.*` are left out: bookkeeping). Sorted; the values per config in
/// `values` (key -> one string per config, "" where missing) when not null.
std::vector<std::string> differing_keys(const std::vector<std::string>& config_yamls,
                                        std::map<std::string, std::vector<std::string>>* values = nullptr);

/// The columns of the runs table both GUIs show beside an overlay: the
/// metrics worth a column (those any run logs, not `lr-*` or `*_seconds`, by
/// name, at most `most`) and the config keys that differ between the runs
/// (differing_keys; none until every run has sent its config).
struct RunsTable {
  std::vector<std::string> metrics;
  std::vector<std::string> keys;
  std::map<std::string, std::vector<std::string>> values;  ///< key -> its value per run
};

/// RunsTable kept up to date frame by frame: the configs are parsed again
/// only when the number of known ones changes.
class RunsTableModel {
 public:
  /// `configs`: each run's resolved config YAML ("" while unknown), as `runs`.
  const RunsTable& update(const std::vector<ChartRun>& runs, const std::vector<std::string>& configs, size_t most = 4);
  const RunsTable& table() const { return table_; }

 private:
  RunsTable table_;
  size_t configs_seen_ = ~size_t(0);
};

}  // namespace gantry::client
