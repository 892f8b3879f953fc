#include "chart_panel.hpp"

#include <QChart>
#include <QDateTime>
#include <QDateTimeAxis>
#include <QFile>
#include <QHBoxLayout>
#include <QLabel>
#include <QLegend>
#include <QLegendMarker>
#include <QLineSeries>
#include <QLogValueAxis>
#include <QMouseEvent>
#include <QTextStream>
#include <QToolButton>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>
#include <cmath>

namespace gantry::monitor {

ChartPanel::ChartPanel(const QString& group, QWidget* parent) : QWidget(parent), group_(group) {
  auto* chart = new QChart;
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  view_ = new ChartView(chart, this);
  view_->setRenderHint(QPainter::Antialiasing, false);  // thousands of segments: keep it cheap
  view_->setMinimumHeight(220);
  title_ = new QLabel("<b>" + group.toHtmlEscaped() + "</b>");
  auto* reset = new QToolButton;
  reset->setText("Reset zoom");
  auto* png = new QToolButton;
  png->setText("PNG...");
  png->setObjectName("export_png");
  auto* csv = new QToolButton;
  csv->setText("CSV...");
  csv->setObjectName("export_csv");
  auto* head = new QHBoxLayout;
  head->addWidget(title_);
  head->addStretch();
  head->addWidget(reset);
  head->addWidget(png);
  head->addWidget(csv);
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->addLayout(head);
  box->addWidget(view_, 1);
  connect(reset, &QToolButton::clicked, this, &ChartPanel::reset_zoom);
  // Decimation depends on the plot's width: redraw when it changes.
  connect(chart, &QChart::plotAreaChanged, this, [this](const QRectF& area) {
    if (static_cast<int>(area.width()) != columns_) emit view_changed();
  });
  connect(png, &QToolButton::clicked, this, [this] { emit export_requested(false); });
  connect(csv, &QToolButton::clicked, this, [this] { emit export_requested(true); });
}

QChart* ChartPanel::chart() const { return view_->chart(); }

void ChartPanel::rebuild(const ChartOptions& opt) {
  QChart* c = chart();
  c->removeAllSeries();
  for (QAbstractAxis* a : c->axes()) {
    c->removeAxis(a);
    delete a;
  }
  lines_.clear();
  if (opt.x == XAxis::kWall) {
    auto* a = new QDateTimeAxis;
    a->setFormat("HH:mm:ss");
    a->setTitleText("wall time");
    x_axis_ = a;
  } else {
    auto* a = new QValueAxis;
    a->setTitleText(opt.x == XAxis::kStep ? "step" : "seconds since start");
    a->setLabelFormat("%g");
    x_axis_ = a;
  }
  if (opt.log_y) {
    auto* a = new QLogValueAxis;
    a->setLabelFormat("%g");
    a->setBase(10);
    y_axis_ = a;
  } else {
    auto* a = new QValueAxis;
    a->setLabelFormat("%.3g");
    y_axis_ = a;
  }
  c->addAxis(x_axis_, Qt::AlignBottom);
  c->addAxis(y_axis_, Qt::AlignLeft);
  for (const auto& l : chart_.lines) {
    const QColor color = QColor::fromRgb(l.color);
    const QString name = QString::fromStdString(l.label);
    Line line;
    line.raw = new QLineSeries;
    line.smooth = new QLineSeries;
    QColor faint = color;
    faint.setAlpha(opt.smoothing > 0 ? 70 : 255);
    line.raw->setPen(QPen(faint, 1));
    line.smooth->setPen(QPen(color, 2));
    line.smooth->setName(name);
    line.raw->setName(name + " (raw)");
    c->addSeries(line.raw);
    c->addSeries(line.smooth);
    for (QLineSeries* s : {line.raw, line.smooth}) {
      s->attachAxis(x_axis_);
      s->attachAxis(y_axis_);
      s->setUseOpenGL(false);
    }
    if (opt.smoothing > 0) {
      c->legend()->markers(line.raw).front()->setVisible(false);
    } else {
      line.smooth->setVisible(false);
      line.raw->setName(name);
    }
    lines_.push_back(line);
  }
  built_ = opt;
}

void ChartPanel::redraw(const client::RunState& state, const ChartOptions& opt) {
  redraw({{"run", &state.series(), true, state.info() ? state.info()->start_time : 0}}, opt);
}

void ChartPanel::redraw(const std::vector<client::ChartRun>& runs, const ChartOptions& opt) {
  runs_ = runs;
  drawn_ = true;
  if (built_ && built_->x != opt.x) zoom_.reset();  // another unit
  scale_ = opt.x == XAxis::kWall ? 1000 : 1;        // QDateTimeAxis counts milliseconds
  columns_ = static_cast<int>(chart()->plotArea().width());
  client::ChartOptions co;
  co.smoothing = opt.smoothing;
  co.log_y = opt.log_y;
  co.columns = std::max(50, columns_);
  co.x = opt.x;
  if (zoom_) co.zoomed = true, co.x_lo = zoom_->first / scale_, co.x_hi = zoom_->second / scale_;
  chart_ = model_.build(runs_, group_.toStdString(), co);
  std::vector<std::string> names;
  for (const auto& l : chart_.lines) names.push_back(l.label);
  if (names != names_ || !built_ || *built_ != opt) {
    names_ = names;
    rebuild(opt);
  }

  // Points first, then the axes' ranges, then hand the points over: Qt
  // Charts re-lays out every series on each range change, so ranges go first.
  std::vector<std::pair<QLineSeries*, QList<QPointF>>> out;
  drawn_points_ = 0;
  auto points_of = [&](const std::vector<double>& x, const std::vector<double>& y, QLineSeries* series) {
    QList<QPointF> pts;
    pts.reserve(static_cast<qsizetype>(x.size()));
    for (size_t i = 0; i < x.size(); ++i) pts.append(QPointF(x[i] * scale_, y[i]));
    drawn_points_ += static_cast<size_t>(pts.size());
    out.emplace_back(series, std::move(pts));
  };
  for (size_t k = 0; k < chart_.lines.size(); ++k) {
    lines_[k].raw->setPointsVisible(chart_.lines[k].markers);  // a lone point is otherwise not drawn
    points_of(chart_.lines[k].x, chart_.lines[k].y, lines_[k].raw);
    if (opt.smoothing > 0) points_of(chart_.lines[k].sx, chart_.lines[k].sy, lines_[k].smooth);
  }
  for (auto& [series, pts] : out) series->clear();  // range changes then cost nothing
  const double lo = chart_.x.lo * scale_, hi = chart_.x.hi * scale_;
  if (auto* t = qobject_cast<QDateTimeAxis*>(x_axis_))
    t->setRange(QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(lo)),
                QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(hi)));
  else
    x_axis_->setRange(lo, hi);
  if (opt.log_y)
    y_axis_->setRange(std::pow(10.0, chart_.y.lo), std::pow(10.0, chart_.y.hi));
  else
    y_axis_->setRange(chart_.y.lo, chart_.y.hi);
  // Ticks at round numbers inside the data's range (not a range stretched to round ends).
  for (QAbstractAxis* a : {x_axis_, y_axis_})
    if (auto* v = qobject_cast<QValueAxis*>(a)) {
      const double step = client::tick_step(v->max() - v->min(), a == x_axis_ ? 8 : 6);
      v->setTickType(QValueAxis::TicksDynamic);
      v->setTickAnchor(0);
      v->setTickInterval(step);
    }
  for (auto& [series, pts] : out) series->replace(pts);
}

void ChartPanel::reset_zoom() {
  zoom_.reset();
  emit view_changed();
}

void ChartPanel::zoom_to(double x0, double x1) {
  if (x1 < x0) std::swap(x0, x1);
  if (x1 - x0 <= 0) return;
  zoom_ = std::make_pair(x0, x1);
  emit view_changed();
}

void ChartPanel::hover_at(double at) {
  if (!drawn_) return;
  // The model's read-out, one line: "step N   g_loss 1.2 (smoothed 1.3)   d_loss ..."
  QString text = QString::fromStdString(model_.readout(runs_, chart_, at / scale_));
  emit hovered(text.replace("\n", "   "));
}

bool ChartPanel::export_png(const QString& path) { return view_->grab().save(path, "PNG"); }

bool ChartPanel::export_csv(const QString& path) const {
  if (!drawn_) return false;
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "metric,step,wall_time,value,smoothed\n";
  for (const auto& line : chart_.lines) {
    const std::string& name = line.label;  // the metric, or "<run>: <metric>" for several runs
    const auto& s = runs_[line.run].series->at(line.metric);
    const std::vector<double> sm = client::smooth_ema(s.values, built_ ? built_->smoothing : 0);
    for (size_t i = 0; i < s.size(); ++i)
      out << QString::fromStdString(name) << ',' << static_cast<qint64>(s.steps[i]) << ','
          << QString::number(s.wall_times[i], 'f', 3) << ',' << QString::number(s.values[i], 'g', 9) << ','
          << QString::number(sm[i], 'g', 9) << '\n';
  }
  return out.status() == QTextStream::Ok && f.flush();
}

ChartView::ChartView(QChart* chart, ChartPanel* panel)
    : QChartView(chart), panel_(panel), band_(new QRubberBand(QRubberBand::Rectangle, this)) {
  setMouseTracking(true);
}

void ChartView::mousePressEvent(QMouseEvent* e) {
  if (e->button() == Qt::LeftButton) {
    press_ = e->position().toPoint();
    band_->setGeometry(QRect(*press_, QSize()));
    band_->show();
  }
  QChartView::mousePressEvent(e);
}

void ChartView::mouseMoveEvent(QMouseEvent* e) {
  const QPointF value = chart()->mapToValue(e->position());
  panel_->hover_at(value.x());
  if (press_) {
    const QRectF area = chart()->plotArea();
    band_->setGeometry(QRect(QPoint(press_->x(), static_cast<int>(area.top())),
                             QPoint(e->position().toPoint().x(), static_cast<int>(area.bottom())))
                           .normalized());
  }
  QChartView::mouseMoveEvent(e);
}

void ChartView::mouseReleaseEvent(QMouseEvent* e) {
  if (press_ && e->button() == Qt::LeftButton) {
    band_->hide();
    if (std::abs(e->position().x() - press_->x()) > 4)
      panel_->zoom_to(chart()->mapToValue(QPointF(*press_)).x(), chart()->mapToValue(e->position()).x());
    press_.reset();
  }
  QChartView::mouseReleaseEvent(e);
}

void ChartView::mouseDoubleClickEvent(QMouseEvent* e) {
  panel_->reset_zoom();
  QChartView::mouseDoubleClickEvent(e);
}

}  // namespace gantry::monitor
