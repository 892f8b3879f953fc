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
#include <limits>

namespace gantry::monitor {

namespace {

QString number(double v) { return QString::number(v, 'g', 5); }

}  // namespace

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

const std::vector<double>& ChartPanel::base_x(const client::Series& s) const {
  return built_ && built_->x == XAxis::kStep ? s.steps : s.wall_times;
}

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
  for (size_t i = 0; i < names_.size(); ++i) {
    const QColor color = QColor::fromRgb(client::series_color(i));
    Line line;
    line.raw = new QLineSeries;
    line.smooth = new QLineSeries;
    QColor faint = color;
    faint.setAlpha(opt.smoothing > 0 ? 70 : 255);
    line.raw->setPen(QPen(faint, 1));
    line.smooth->setPen(QPen(color, 2));
    line.smooth->setName(QString::fromStdString(names_[i]));
    line.raw->setName(QString::fromStdString(names_[i]) + " (raw)");
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
      line.raw->setName(QString::fromStdString(names_[i]));
    }
    lines_.emplace(names_[i], std::move(line));
  }
  built_ = opt;
}

void ChartPanel::redraw(const client::RunState& state, const ChartOptions& opt) {
  state_ = &state;
  std::vector<std::string> names;
  for (const auto& [name, s] : state.series())
    if (QString::fromStdString(client::metric_group(name)) == group_) names.push_back(name);
  if (names != names_ || !built_ || *built_ != opt) {
    if (built_ && built_->x != opt.x) zoom_.reset();  // another unit
    names_ = names;
    rebuild(opt);
  }
  scale_ = 1;
  offset_ = 0;
  if (opt.x == XAxis::kRelative) offset_ = state.info() ? -state.info()->start_time : 0;
  if (opt.x == XAxis::kWall) scale_ = 1000;  // QDateTimeAxis counts milliseconds

  // The x range: the zoom, or everything.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& name : names_) {
    const auto& s = state.series().at(name);
    const auto& x = base_x(s);
    if (!x.empty()) {
      lo = std::min(lo, to_plot(x.front()));
      hi = std::max(hi, to_plot(x.back()));
    }
  }
  if (!(lo <= hi)) lo = 0, hi = 1;
  if (zoom_) lo = zoom_->first, hi = zoom_->second;
  if (hi <= lo) hi = lo + 1;
  columns_ = static_cast<int>(chart()->plotArea().width());
  const int columns = std::max(50, columns_);

  // Decimate everything first, set the axes, then hand the points over: Qt
  // Charts re-lays out every series on each range change, so ranges go first.
  double ylo = std::numeric_limits<double>::infinity(), yhi = -ylo;
  std::vector<std::pair<QLineSeries*, QList<QPointF>>> out;
  drawn_points_ = 0;
  for (const auto& name : names_) {
    const auto& s = state.series().at(name);
    Line& line = lines_.at(name);
    const auto& x = base_x(s);
    const std::vector<double>& smooth = line.smoother.update(s.values, opt.smoothing, s.generation);
    auto points_of = [&](const std::vector<double>& y, QLineSeries* series, client::Decimator& d, uint64_t gen) {
      const auto keep = d.decimate(x, y, (lo - offset_) / scale_, (hi - offset_) / scale_, columns, gen);
      QList<QPointF> pts;
      pts.reserve(static_cast<qsizetype>(keep.size()));
      for (size_t i : keep) {
        if (opt.log_y && !(y[i] > 0)) continue;
        const double px = to_plot(x[i]);
        pts.append(QPointF(px, y[i]));
        if (px >= lo && px <= hi) ylo = std::min(ylo, y[i]), yhi = std::max(yhi, y[i]);
      }
      drawn_points_ += static_cast<size_t>(pts.size());
      out.emplace_back(series, std::move(pts));
    };
    points_of(s.values, line.raw, line.raw_decimator, s.generation);
    if (opt.smoothing > 0) points_of(smooth, line.smooth, line.smooth_decimator, line.smoother.generation());
  }
  for (auto& [series, pts] : out) series->clear();  // range changes then cost nothing
  if (!(ylo <= yhi)) ylo = opt.log_y ? 0.1 : 0, yhi = 1;
  if (opt.log_y) {
    ylo /= 1.2, yhi *= 1.2;
  } else {
    const double pad = (yhi - ylo) * 0.05 + (yhi == ylo ? 0.5 : 0);
    ylo -= pad, yhi += pad;
  }
  if (auto* t = qobject_cast<QDateTimeAxis*>(x_axis_))
    t->setRange(QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(lo)),
                QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(hi)));
  else
    x_axis_->setRange(lo, hi);
  y_axis_->setRange(ylo, yhi);
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
  if (!state_) return;
  QString text;
  for (const auto& name : names_) {
    const auto& s = state_->series().at(name);
    const auto& x = base_x(s);
    const long i = client::nearest_index(x, (at - offset_) / scale_);
    if (i < 0) continue;
    if (text.isEmpty()) text = QString("step %1   ").arg(static_cast<qint64>(s.steps[i]));
    text += QString("%1 %2").arg(QString::fromStdString(name), number(s.values[i]));
    const auto& sm = lines_.at(name).smoother.smoothed();
    if (built_ && built_->smoothing > 0 && static_cast<size_t>(i) < sm.size())
      text += QString(" (smoothed %1)").arg(number(sm[i]));
    text += "   ";
  }
  emit hovered(text.trimmed());
}

bool ChartPanel::export_png(const QString& path) { return view_->grab().save(path, "PNG"); }

bool ChartPanel::export_csv(const QString& path) const {
  if (!state_) return false;
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Truncate | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "metric,step,wall_time,value,smoothed\n";
  for (const auto& name : names_) {
    const auto& s = state_->series().at(name);
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
