// Scalar series as the GUIs keep them, and the two things drawn from them:
// TensorBoard's debiased EMA smoothing and min/max decimation. No Qt, no
// ImGui: gantry-monitor and gantry-view both draw from this.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gantry::client {

/// One metric's points in arrival order (structure of arrays: drawing reads one column).
struct Series {
  std::vector<double> steps;       ///< global step of each point
  std::vector<double> wall_times;  ///< Unix seconds
  std::vector<double> values;
  /// Changes whenever points are removed (not when appended): caches keyed on it rebuild.
  uint64_t generation = 0;
  size_t size() const { return values.size(); }
  void append(int64_t step, double wall_time, double value);
  /// Drops every point with a step greater than `step` (a resumed run redoes them).
  void drop_after(int64_t step);
};

/// TensorBoard's smoothing: an exponential moving average debiased by
/// 1 - weight^k (so the first points are not pulled towards 0); non-finite
/// values pass through unsmoothed and a constant series is left as is.
/// weight in [0, 1): 0 is no smoothing.
std::vector<double> smooth_ema(const std::vector<double>& values, double weight);

/// smooth_ema kept up to date as points are appended (O(new points) per
/// update; a weight change or a shrunk series recomputes everything).
class Smoother {
 public:
  /// `data_generation`: the series' generation (a change means points were removed).
  const std::vector<double>& update(const std::vector<double>& values, double weight, uint64_t data_generation = 0);
  const std::vector<double>& smoothed() const { return out_; }
  /// Changes whenever smoothed() is recomputed rather than extended.
  uint64_t generation() const { return generation_; }

 private:
  std::vector<double> out_;
  double weight_ = -1, last_ = 0;
  int64_t accum_ = 0;
  bool constant_ = true;
  double first_ = 0;
  uint64_t generation_ = 0, data_generation_ = 0;
};

/// Indices of the points to draw for the x range [x0, x1] on `columns` pixel
/// columns: in each column the points with the smallest and the largest y
/// (in their order), so spikes stay visible at any zoom, plus the nearest
/// point on each side outside the range so lines reach the edges. x must be
/// ascending. Non-finite y values are skipped. At most 2 * columns + 2 indices.
std::vector<size_t> decimate(const std::vector<double>& x, const std::vector<double>& y, double x0, double x1,
                             int columns);

/// decimate() for a series that grows: the minimum and maximum of every block
/// of kBlock points are kept and extended as points are appended, so a redraw
/// costs O(columns x blocks per column), not O(points). `generation` names the
/// data: when it changes (points removed, a series recomputed) the blocks are rebuilt.
class Decimator {
 public:
  static constexpr size_t kBlock = 64;
  std::vector<size_t> decimate(const std::vector<double>& x, const std::vector<double>& y, double x0, double x1,
                               int columns, uint64_t generation = 0);

 private:
  void extend(const std::vector<double>& y);
  static constexpr size_t kNone = ~size_t(0);
  std::vector<size_t> lo_, hi_;  // per whole block: index of its min / max finite y (kNone: none)
  uint64_t generation_ = ~0ull;
};

/// The chart a metric is drawn in: the part before the first '/' ("val/acc"
/// -> "val"), "loss" for every *_loss metric (g_loss and d_loss together),
/// else the metric's own name.
std::string metric_group(const std::string& name);

/// A round tick interval (1, 2 or 5 times a power of ten) giving about `ticks` ticks over `span`.
double tick_step(double span, int ticks);

/// The colour of the i-th metric of a chart (0xRRGGBB), the same in both GUIs.
uint32_t series_color(size_t i);

/// Index of the point whose x is nearest to `at` (x ascending; -1 when empty).
long nearest_index(const std::vector<double>& x, double at);

}  // namespace gantry::client
