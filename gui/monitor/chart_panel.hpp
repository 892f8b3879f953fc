// One chart of the Scalars view: the metrics of one group, raw (faint) and
// smoothed (solid) as in TensorBoard. What to draw (lines, decimation to about
// two points per pixel column, ranges, read-out) comes from gantry::client's
// chart model (client/chart.hpp, shared with gantry-view); this paints it
// with Qt Charts. Drag to zoom into an x range,
// double-click or reset to see everything; hovering reads out the values.
#pragma once

#include <QChartView>
#include <QPointer>
#include <QRubberBand>
#include <QWidget>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "chart.hpp"
#include "run_state.hpp"
#include "series.hpp"

class QLabel;
class QChart;
class QLineSeries;
class QAbstractAxis;

namespace gantry::monitor {

using XAxis = client::XAxis;

struct ChartOptions {
  double smoothing = 0.6;  ///< TensorBoard's default
  bool log_y = false;
  XAxis x = XAxis::kStep;
  bool operator!=(const ChartOptions& o) const { return smoothing != o.smoothing || log_y != o.log_y || x != o.x; }
};

class ChartView;

class ChartPanel : public QWidget {
  Q_OBJECT
 public:
  ChartPanel(const QString& group, QWidget* parent = nullptr);

  /// Redraws from `state` (the metrics of this group) with `opt`.
  void redraw(const client::RunState& state, const ChartOptions& opt);
  /// Redraws the metrics of this group of every visible run in `runs` (a
  /// colour per run when there are several); the series must outlive the panel's use.
  void redraw(const std::vector<client::ChartRun>& runs, const ChartOptions& opt);
  void reset_zoom();
  /// Writes the chart as shown.
  bool export_png(const QString& path);
  /// Writes every point (full resolution): metric,step,wall_time,value,smoothed.
  bool export_csv(const QString& path) const;

  const QString& group() const { return group_; }
  /// Points handed to Qt Charts on the last redraw (after decimation), all series.
  size_t drawn_points() const { return drawn_points_; }
  QChart* chart() const;

 signals:
  void hovered(const QString& text);
  /// The user asked to save this chart (csv: as CSV, else as PNG).
  void export_requested(bool csv);
  /// Zoom changed: redraw.
  void view_changed();

 private:
  friend class ChartView;
  struct Line {
    QLineSeries* raw = nullptr;
    QLineSeries* smooth = nullptr;
  };
  void rebuild(const ChartOptions& opt);
  void zoom_to(double x0, double x1);
  void hover_at(double x);

  QString group_;
  ChartView* view_;
  QLabel* title_;
  std::vector<Line> lines_;         // as chart_.lines
  std::vector<std::string> names_;  // the lines' labels when built
  client::ChartModel model_;
  client::Chart chart_;  // the last one built
  std::vector<client::ChartRun> runs_;
  QAbstractAxis* x_axis_ = nullptr;
  QAbstractAxis* y_axis_ = nullptr;
  std::optional<ChartOptions> built_;
  std::optional<std::pair<double, double>> zoom_;  // plot x units
  double scale_ = 1;                               // plot x per chart x: 1000 for the wall-time axis (milliseconds)
  size_t drawn_points_ = 0;
  int columns_ = 0;     // plot width of the last redraw
  bool drawn_ = false;  // redraw ran: runs_ holds what is shown (hover, export)
};

/// The chart widget itself: mouse handling for zoom and hover.
class ChartView : public QChartView {
  Q_OBJECT
 public:
  ChartView(QChart* chart, ChartPanel* panel);

 protected:
  void mousePressEvent(QMouseEvent* e) override;
  void mouseMoveEvent(QMouseEvent* e) override;
  void mouseReleaseEvent(QMouseEvent* e) override;
  void mouseDoubleClickEvent(QMouseEvent* e) override;

 private:
  ChartPanel* panel_;
  QRubberBand* band_;
  std::optional<QPoint> press_;
};

}  // namespace gantry::monitor
