#include "ranks_view.hpp"

#include <QDateTime>
#include <QHeaderView>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>

namespace gantry::monitor {

RanksView::RanksView(QWidget* parent) : QWidget(parent) {
  table_ = new QTableWidget(0, 6);
  table_->setObjectName("ranks");
  table_->setHorizontalHeaderLabels({"rank", "host", "step", "samples/s", "RSS MiB", "last seen"});
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::Stretch);
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->addWidget(table_);
}

void RanksView::refresh(const client::RunState& state, double now) {
  const auto& ranks = state.ranks();
  table_->setRowCount(static_cast<int>(ranks.size()));
  stale_.clear();
  const bool live = state.status() == client::RunStatus::kRunning;
  int row = 0;
  for (const auto& [rank, r] : ranks) {
    const double silent = now - r.wall_time;
    const bool stale = state.is_stale(r, now);
    if (stale) stale_.push_back(rank);
    const QStringList cells = {
        QString::number(rank),
        QString::fromStdString(r.host),
        QString::number(r.step),
        QString::number(r.samples_per_s, 'f', 1),
        QString::number(r.rss_mib, 'f', 0),
        live ? QString::fromStdString(client::duration_text(std::max(0.0, silent))) + " ago" +
                   (stale ? "  (stopped reporting)" : "")
             : QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(r.wall_time * 1000)).toString("HH:mm:ss")};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = table_->item(row, c);
      if (!item) table_->setItem(row, c, item = new QTableWidgetItem);
      if (item->text() != cells[c]) item->setText(cells[c]);
      item->setBackground(stale ? QColor(255, 190, 190) : QBrush());
    }
    ++row;
  }
}

}  // namespace gantry::monitor
