#include "scalars_view.hpp"

#include <QCheckBox>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QResizeEvent>
#include <QLabel>
#include <QMessageBox>
#include <QScrollArea>
#include <QSlider>
#include <QVBoxLayout>
#include <set>

namespace gantry::monitor {

ScalarsView::ScalarsView(QWidget* parent) : QWidget(parent) {
  smoothing_ = new QSlider(Qt::Horizontal);
  smoothing_->setObjectName("smoothing");
  smoothing_->setRange(0, 999);
  smoothing_->setValue(600);
  smoothing_->setMaximumWidth(200);
  smoothing_label_ = new QLabel("0.600");
  log_y_ = new QCheckBox("log y");
  log_y_->setObjectName("log_y");
  x_axis_ = new QComboBox;
  x_axis_->setObjectName("x_axis");
  x_axis_->addItems({"step", "relative time", "wall time"});
  readout_ = new QLabel(" ");
  readout_->setObjectName("readout");
  readout_->setTextInteractionFlags(Qt::TextSelectableByMouse);

  auto* controls = new QHBoxLayout;
  controls->addWidget(new QLabel("Smoothing"));
  controls->addWidget(smoothing_);
  controls->addWidget(smoothing_label_);
  controls->addSpacing(16);
  controls->addWidget(log_y_);
  controls->addSpacing(16);
  controls->addWidget(new QLabel("x axis"));
  controls->addWidget(x_axis_);
  controls->addStretch();

  auto* inner = new QWidget;
  charts_ = new QGridLayout(inner);
  charts_->setContentsMargins(0, 0, 0, 0);
  auto* scroll = new QScrollArea;
  scroll->setWidgetResizable(true);
  scroll->setWidget(inner);
  scroll->setFrameShape(QFrame::NoFrame);

  auto* box = new QVBoxLayout(this);
  box->addLayout(controls);
  box->addWidget(readout_);
  box->addWidget(scroll, 1);

  auto mark = [this] { dirty_ = true; };
  connect(smoothing_, &QSlider::valueChanged, this, [this, mark](int v) {
    smoothing_label_->setText(QString::number(v / 1000.0, 'f', 3));
    mark();
  });
  connect(log_y_, &QCheckBox::toggled, this, mark);
  connect(x_axis_, &QComboBox::currentIndexChanged, this, mark);
}

ChartOptions ScalarsView::options() const {
  ChartOptions o;
  o.smoothing = smoothing_->value() / 1000.0;
  o.log_y = log_y_->isChecked();
  o.x = static_cast<XAxis>(x_axis_->currentIndex());
  return o;
}

void ScalarsView::set_smoothing(double weight) { smoothing_->setValue(static_cast<int>(weight * 1000 + 0.5)); }

void ScalarsView::reset() {
  for (auto& [g, panel] : panels_) {
    charts_->removeWidget(panel);
    panel->deleteLater();
  }
  panels_.clear();
  readout_->setText(" ");
  dirty_ = true;
}

void ScalarsView::relayout() {
  columns_ = width() >= kTwoColumns ? 2 : 1;
  for (int c = 0; c < 2; ++c) charts_->setColumnStretch(c, c < columns_ ? 1 : 0);  // equal widths
  for (auto& [g, panel] : panels_) charts_->removeWidget(panel);
  int i = 0;
  for (auto& [g, panel] : panels_) {
    charts_->addWidget(panel, i / columns_, i % columns_);
    ++i;
  }
}

void ScalarsView::resizeEvent(QResizeEvent* e) {
  QWidget::resizeEvent(e);
  if ((width() >= kTwoColumns ? 2 : 1) != columns_) relayout();
}

void ScalarsView::refresh(const client::RunState& state) {
  refresh({{"run", &state.series(), true, state.info() ? state.info()->start_time : 0}}, state.version());
}

void ScalarsView::refresh(const std::vector<client::ChartRun>& runs, uint64_t version) {
  if (!dirty_ && version == drawn_version_) return;
  QElapsedTimer timer;
  timer.start();
  std::set<QString> groups;
  for (const auto& g : client::chart_groups(runs)) groups.insert(QString::fromStdString(g));
  for (const QString& g : groups) {
    if (panels_.count(g)) continue;
    auto* panel = new ChartPanel(g);
    panel->setObjectName("chart_" + g);
    panels_[g] = panel;
    relayout();
    connect(panel, &ChartPanel::hovered, readout_, &QLabel::setText);
    connect(panel, &ChartPanel::view_changed, this, [this] { dirty_ = true; });
    connect(panel, &ChartPanel::export_requested, this, [this, panel](bool csv) {
      const QString path =
          QFileDialog::getSaveFileName(this, "Export " + panel->group(), panel->group() + (csv ? ".csv" : ".png"),
                                       csv ? "CSV (*.csv)" : "PNG (*.png)");
      if (path.isEmpty()) return;
      if (!(csv ? panel->export_csv(path) : panel->export_png(path)))
        QMessageBox::warning(this, "Export", "cannot write " + path);
    });
  }
  const ChartOptions opt = options();
  // Cleared before drawing: a plot width changed by the redraw itself (new
  // axis labels) marks it dirty again, for the next tick to decimate anew.
  dirty_ = false;
  for (auto& [g, panel] : panels_) panel->redraw(runs, opt);
  drawn_version_ = version;
  last_ms_ = static_cast<double>(timer.nsecsElapsed()) / 1e6;
}

}  // namespace gantry::monitor
