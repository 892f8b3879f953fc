#include "ranks_view.hpp"

#include <QCheckBox>
#include <QDateTime>
#include <QElapsedTimer>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QHelpEvent>
#include <QLabel>
#include <QPainter>
#include <QTableWidget>
#include <QToolTip>
#include <QVBoxLayout>
#include <algorithm>

namespace gantry::monitor {

namespace {

constexpr int kCellW = 14, kCellH = 19, kHeat = 12, kGap = 2, kLine = 24, kMargin = 4;

QColor rgb(uint32_t v) { return QColor(int(v >> 16 & 0xff), int(v >> 8 & 0xff), int(v & 0xff)); }

QString ms(double v) { return v < 0 ? QString("-") : QString::number(v, 'f', v < 10 ? 2 : 1); }

QString node_text(const client::NodeGroup& n) {
  QString t = QString("%1: %2 rank%3")
                  .arg(QString::fromStdString(n.host))
                  .arg(n.ranks.size())
                  .arg(n.ranks.size() == 1 ? "" : "s");
  if (n.busy_median >= 0) t += QString(", busy median %1 ms, max %2 ms").arg(ms(n.busy_median), ms(n.busy_max));
  if (n.max_ratio >= 0) t += QString(" (%1x the job's median)").arg(n.max_ratio, 0, 'f', 1);
  t += QString(", %1 samples/s").arg(n.samples_per_s, 0, 'f', 0);
  if (n.stragglers) t += QString(", %1 straggler%2").arg(n.stragglers).arg(n.stragglers == 1 ? "" : "s");
  if (n.stale) t += QString(", %1 stopped reporting").arg(n.stale);
  return t;
}

}  // namespace

RankStrip::RankStrip(QWidget* parent) : QWidget(parent) {
  setObjectName("rank_strip");
  setMouseTracking(true);
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Preferred);
}

void RankStrip::set(client::RanksSummary summary) {
  summary_ = std::move(summary);
  placed_ = layout(width());
  updateGeometry();
  update();
}

std::vector<RankStrip::Placed> RankStrip::layout(int width) const {
  std::vector<Placed> out;
  const QFontMetrics fm(font());
  int label_w = 0;
  for (const auto& n : summary_.nodes)
    label_w = std::max(label_w, fm.horizontalAdvance(QString::fromStdString(n.host)));
  label_w = std::min(label_w, 120) + 6;
  width = std::max(width, label_w + 4 * (kCellW + kGap) + 2 * kMargin);
  int x = kMargin, y = kMargin;
  for (const auto& n : summary_.nodes) {
    const int block = label_w + int(n.ranks.size()) * (kCellW + kGap) + 12;
    if (x > kMargin && x + block > width) {
      x = kMargin;
      y += kLine;
    }
    Placed p;
    p.label = QRect(x, y, label_w - 4, kCellH);
    int cx = x + label_w;
    for (const auto& c : n.ranks) {
      if (cx + kCellW > width - kMargin) {  // a node wider than the view: its cells wrap under it
        cx = x + label_w;
        y += kLine;
      }
      p.cells.emplace_back(QRect(cx, y, kCellW, kCellH), c.status.rank);
      cx += kCellW + kGap;
    }
    x = cx + 12;
    out.push_back(std::move(p));
  }
  return out;
}

int RankStrip::heightForWidth(int width) const {
  const auto placed = layout(width);
  int bottom = 0;
  for (const auto& p : placed) {
    bottom = std::max(bottom, p.label.bottom());
    for (const auto& [r, rank] : p.cells) bottom = std::max(bottom, r.bottom());
  }
  return bottom + kMargin + 1;
}

QSize RankStrip::sizeHint() const { return QSize(600, heightForWidth(std::max(width(), 600))); }

void RankStrip::resizeEvent(QResizeEvent*) { placed_ = layout(width()); }

int RankStrip::rank_at(const QPoint& p) const {
  for (const auto& placed : placed_)
    for (const auto& [r, rank] : placed.cells)
      if (r.adjusted(-1, -1, 1, 1).contains(p)) return int(rank);
  return -1;
}

QRect RankStrip::cell_of(uint32_t rank) const {
  for (const auto& placed : placed_)
    for (const auto& [r, k] : placed.cells)
      if (k == rank) return r;
  return {};
}

bool RankStrip::event(QEvent* e) {
  if (e->type() != QEvent::ToolTip) return QWidget::event(e);
  auto* help = static_cast<QHelpEvent*>(e);
  for (size_t i = 0; i < placed_.size() && i < summary_.nodes.size(); ++i) {
    const auto& node = summary_.nodes[i];
    if (placed_[i].label.contains(help->pos())) {
      QToolTip::showText(help->globalPos(), node_text(node), this);
      return true;
    }
    for (size_t j = 0; j < placed_[i].cells.size() && j < node.ranks.size(); ++j)
      if (placed_[i].cells[j].first.adjusted(-1, -1, 1, 1).contains(help->pos())) {
        QToolTip::showText(help->globalPos(), QString::fromStdString(client::rank_detail(node.ranks[j])), this);
        return true;
      }
  }
  QToolTip::hideText();
  e->ignore();
  return true;
}

void RankStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  for (size_t i = 0; i < placed_.size() && i < summary_.nodes.size(); ++i) {
    const auto& node = summary_.nodes[i];
    p.setPen(node.stragglers ? QColor(200, 30, 30) : palette().text().color());
    p.drawText(
        placed_[i].label, Qt::AlignVCenter | Qt::AlignLeft,
        QFontMetrics(font()).elidedText(QString::fromStdString(node.host), Qt::ElideMiddle, placed_[i].label.width()));
    for (size_t j = 0; j < placed_[i].cells.size() && j < node.ranks.size(); ++j) {
      const client::RankCell& c = node.ranks[j];
      const QRect r = placed_[i].cells[j].first;
      const QRect heat(r.left(), r.top(), r.width(), kHeat);
      p.fillRect(heat, c.stale ? QColor(170, 170, 170) : rgb(client::heat_rgb(c.heat)));
      if (c.stale) {
        p.setPen(QColor(90, 90, 90));
        p.drawLine(heat.topLeft(), heat.bottomRight());
      }
      // The step's parts, left to right, in proportion.
      const QRect bar(r.left(), r.top() + kHeat + 1, r.width(), r.height() - kHeat - 1);
      const auto parts = client::step_parts(c.status);
      double total = 0;
      for (const auto& part : parts) total += std::max(0.0, part.ms);
      if (total > 0) {
        double x = bar.left();
        for (const auto& part : parts) {
          const double w = bar.width() * std::max(0.0, part.ms) / total;
          p.fillRect(QRectF(x, bar.top(), w, bar.height()), rgb(part.rgb));
          x += w;
        }
      } else {
        p.fillRect(bar, QColor(210, 210, 210));
      }
      if (c.straggler) {
        p.setPen(QPen(QColor(200, 0, 0), 2));
        p.setBrush(Qt::NoBrush);
        p.drawRect(r.adjusted(-1, -1, 1, 1));
      }
    }
  }
}

RanksView::RanksView(QWidget* parent) : QWidget(parent) {
  headline_ = new QLabel;
  headline_->setObjectName("ranks_headline");
  slowest_ = new QCheckBox("slowest first");
  slowest_->setObjectName("slowest_first");
  strip_ = new RankStrip;
  table_ = new QTableWidget(0, kColumns);
  table_->setObjectName("ranks");
  table_->setHorizontalHeaderLabels({"rank", "host", "step", "samples/s", "step ms", "busy ms", "data", "compute",
                                     "comm", "optim.", "other", "CPU %", "RSS MiB", "GPU", "last seen"});
  table_->verticalHeader()->setVisible(false);
  table_->verticalHeader()->setDefaultSectionSize(20);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Interactive);
  table_->horizontalHeader()->setStretchLastSection(true);
  for (int c = 0; c < kColumns; ++c)
    table_->setColumnWidth(c, c == kHost ? 110 : c == kBusyMs ? 100 : c == kGpu ? 130 : c == kLastSeen ? 150 : 66);
  auto* top = new QHBoxLayout;
  top->addWidget(headline_, 1);
  top->addWidget(slowest_);
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->setSpacing(2);
  box->addLayout(top);
  box->addWidget(strip_);
  box->addWidget(table_, 1);
  connect(slowest_, &QCheckBox::toggled, this, [this] { dirty_ = true; });  // the window's next tick redraws
}

int RanksView::row_of(uint32_t rank) const {
  for (size_t i = 0; i < row_rank_.size(); ++i)
    if (row_rank_[i] == int64_t(rank)) return int(i);
  return -1;
}

void RanksView::refresh(const client::RunState& state, double now) {
  const int64_t second = int64_t(now);
  if (!dirty_ && &state == last_state_ && state.version() == last_version_ && second == last_second_ &&
      slowest_->isChecked() == last_slowest_) {
    ++skipped_;
    return;
  }
  QElapsedTimer timer;
  timer.start();
  dirty_ = false;
  last_state_ = &state;
  last_version_ = state.version();
  last_second_ = second;
  last_slowest_ = slowest_->isChecked();
  client::RanksSummary summary = client::summarize_ranks(state, now, slowest_->isChecked());
  const bool live = state.status() == client::RunStatus::kRunning;
  const bool grouped = summary.nodes.size() > 1;  // a node's row before its ranks
  headline_->setText(QString::fromStdString(summary.headline()));
  int rows = int(summary.ranks) + (grouped ? int(summary.nodes.size()) : 0);
  table_->setRowCount(rows);
  row_rank_.assign(size_t(rows), -1);
  stale_.clear();
  int row = 0;
  auto put = [&](const QStringList& cells, const QBrush& background, bool bold) {
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = table_->item(row, c);
      if (!item) table_->setItem(row, c, item = new QTableWidgetItem);
      if (item->text() != cells[c]) item->setText(cells[c]);
      if (item->background() != background) item->setBackground(background);
      if (item->font().bold() != bold) {
        QFont f = item->font();
        f.setBold(bold);
        item->setFont(f);
      }
    }
    ++row;
  };
  for (const auto& node : summary.nodes) {
    if (grouped) {
      put({QString("%1 ranks").arg(node.ranks.size()), QString::fromStdString(node.host), "",
           QString::number(node.samples_per_s, 'f', 1), "", ms(node.busy_median), "", "", "", "", "", "", "", "",
           node.stragglers       ? QString("%1 straggler%2").arg(node.stragglers).arg(node.stragglers == 1 ? "" : "s")
           : node.stale          ? QString("%1 stopped reporting").arg(node.stale)
           : node.max_ratio >= 0 ? QString("slowest %1x the median").arg(node.max_ratio, 0, 'f', 1)
                                 : QString()},
          QBrush(node.stragglers ? QColor(255, 215, 215) : QColor(232, 232, 232)), true);
    }
    for (const client::RankCell& c : node.ranks) {
      const wire::RankStatus& r = c.status;
      if (c.stale) stale_.push_back(r.rank);
      row_rank_[size_t(row)] = r.rank;
      const double silent = now - r.wall_time;
      QString gpu = "-";
      if (r.gpu_util_pct >= 0 || r.gpu_mem_mib >= 0)
        gpu = QString("%1% %2 MiB %3 W")
                  .arg(r.gpu_util_pct, 0, 'f', 0)
                  .arg(r.gpu_mem_mib, 0, 'f', 0)
                  .arg(r.gpu_power_w, 0, 'f', 0);
      QString busy = ms(r.busy_ms());
      if (c.ratio >= 0) busy += QString(" (%1x)").arg(c.ratio, 0, 'f', 1);
      put({QString::number(r.rank), QString::fromStdString(r.host), QString::number(r.step),
           QString::number(r.samples_per_s, 'f', 1), ms(r.step_ms), busy, ms(r.data_ms), ms(r.compute_ms),
           ms(r.comm_ms), ms(r.optimizer_ms), ms(r.other_ms), r.cpu_pct < 0 ? "-" : QString::number(r.cpu_pct, 'f', 0),
           QString::number(r.rss_mib, 'f', 0), gpu,
           live ? QString::fromStdString(client::duration_text(std::max(0.0, silent))) + " ago" +
                      (c.stale       ? "  (stopped reporting)"
                       : c.straggler ? "  (straggler)"
                                     : "")
                : QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(r.wall_time * 1000)).toString("HH:mm:ss") +
                      (c.straggler ? "  (straggler)" : "")},
          c.stale       ? QBrush(QColor(255, 190, 190))
          : c.straggler ? QBrush(QColor(255, 225, 160))
                        : QBrush(),
          false);
    }
  }
  std::sort(stale_.begin(), stale_.end());
  strip_->set(std::move(summary));
  ++refreshes_;
  last_ms_ = double(timer.nsecsElapsed()) / 1e6;
}

}  // namespace gantry::monitor
