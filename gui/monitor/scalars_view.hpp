// The Scalars view: one ChartPanel per metric group (g_loss and d_loss
// together by default), tiled two a row when there is room, the controls
// every chart shares (smoothing, log-y, x axis) and a hover read-out.
#pragma once

#include <QWidget>
#include <map>

#include "chart_panel.hpp"
#include "chart.hpp"
#include "run_state.hpp"

class QCheckBox;
class QComboBox;
class QLabel;
class QSlider;
class QGridLayout;
class QResizeEvent;

namespace gantry::monitor {

class ScalarsView : public QWidget {
  Q_OBJECT
 public:
  explicit ScalarsView(QWidget* parent = nullptr);

  /// Redraws every chart when the state or the options changed since the last call.
  void refresh(const client::RunState& state);
  /// The same for several runs overlaid; `version` changes whenever any of
  /// them did (or one was shown or hidden).
  void refresh(const std::vector<client::ChartRun>& runs, uint64_t version);
  /// Redraw at the next refresh (a run shown or hidden).
  void mark_dirty() { dirty_ = true; }
  /// Other runs are watched from now on: the charts (and their decimation
  /// and smoothing state) are made anew at the next refresh.
  void reset();
  ChartOptions options() const;
  void set_smoothing(double weight);
  std::map<QString, ChartPanel*>& panels() { return panels_; }
  /// Milliseconds the last redraw took (decimation + Qt Charts).
  double last_redraw_ms() const { return last_ms_; }
  /// Charts a row: 2 from kTwoColumns pixels wide, else 1.
  int columns() const { return columns_; }
  static constexpr int kTwoColumns = 700;

 protected:
  void resizeEvent(QResizeEvent* e) override;

 private:
  void relayout();  // the panels in group order, columns() a row

  QSlider* smoothing_;
  QLabel* smoothing_label_;
  QCheckBox* log_y_;
  QComboBox* x_axis_;
  QLabel* readout_;
  QGridLayout* charts_;
  int columns_ = 1;
  std::map<QString, ChartPanel*> panels_;
  uint64_t drawn_version_ = ~0ull;
  bool dirty_ = true;
  double last_ms_ = 0;
};

}  // namespace gantry::monitor
