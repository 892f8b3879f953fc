#include "events_view.hpp"

#include <QDateTime>
#include <QHeaderView>
#include <QScrollBar>
#include <QTableWidget>
#include <QVBoxLayout>

namespace gantry::monitor {

EventsView::EventsView(QWidget* parent) : QWidget(parent) {
  table_ = new QTableWidget(0, 4);
  table_->setObjectName("events");
  table_->setHorizontalHeaderLabels({"time", "step", "event", "detail"});
  table_->verticalHeader()->setVisible(false);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->horizontalHeader()->setStretchLastSection(true);
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->addWidget(table_);
}

void EventsView::forget() { table_->setRowCount(0); }

void EventsView::refresh(const client::RunState& state) {
  const auto& events = state.events();
  if (static_cast<size_t>(table_->rowCount()) == events.size()) return;
  if (static_cast<size_t>(table_->rowCount()) > events.size()) table_->setRowCount(0);
  const bool at_bottom =
      table_->rowCount() == 0 || table_->verticalScrollBar()->value() == table_->verticalScrollBar()->maximum();
  for (size_t i = static_cast<size_t>(table_->rowCount()); i < events.size(); ++i) {
    const auto& e = events[i];
    const int row = static_cast<int>(i);
    table_->insertRow(row);
    const QStringList cells = {
        QDateTime::fromMSecsSinceEpoch(static_cast<qint64>(e.wall_time * 1000)).toString("HH:mm:ss"),
        QString::number(e.step), QString::fromStdString(e.kind), QString::fromStdString(e.text)};
    for (int c = 0; c < cells.size(); ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      if (e.kind == "nan" || e.kind == "failed") item->setForeground(QColor(180, 0, 0));
      table_->setItem(row, c, item);
    }
  }
  table_->resizeColumnsToContents();
  if (at_bottom) table_->scrollToBottom();
}

}  // namespace gantry::monitor
