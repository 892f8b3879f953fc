#include "runs_view.hpp"

#include <QHeaderView>
#include <QSignalBlocker>
#include <QTableWidget>
#include <QVBoxLayout>
#include <set>

#include "chart.hpp"

namespace gantry::monitor {

RunsView::RunsView(QWidget* parent) : QWidget(parent) {
  table_ = new QTableWidget;
  table_->setObjectName("runs");
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  auto* box = new QVBoxLayout(this);
  box->setContentsMargins(0, 0, 0, 0);
  box->addWidget(table_);
  connect(table_, &QTableWidget::itemChanged, this, [this](QTableWidgetItem* item) {
    if (item->column() == 0) emit visibility_changed(item->row(), item->checkState() == Qt::Checked);
  });
  connect(table_, &QTableWidget::currentCellChanged, this, [this](int row, int, int, int) {
    if (row >= 0) emit selected(row);
  });
}

void RunsView::refresh(const std::vector<MonitoredRun>& runs) {
  const QSignalBlocker block(table_);
  // The keys that tell the runs apart, once every run has sent its config.
  size_t with_config = 0;
  for (const auto& r : runs) with_config += r.state.info() ? 1 : 0;
  bool relayout = static_cast<size_t>(table_->rowCount()) != runs.size();
  if (with_config != configs_seen_) {
    configs_seen_ = with_config;
    std::vector<std::string> yamls;
    for (const auto& r : runs) yamls.push_back(r.state.info() ? r.state.info()->config_yaml : "");
    values_.clear();
    keys_ = with_config == runs.size() ? client::differing_keys(yamls, &values_) : std::vector<std::string>{};
    relayout = true;
  }
  // The metrics the runs log (not lrs or timings), at most 4 columns.
  std::set<std::string> names;
  for (const auto& r : runs)
    for (const auto& [name, s] : r.state.series())
      if (name.rfind("lr-", 0) != 0 && !(name.size() > 8 && name.compare(name.size() - 8, 8, "_seconds") == 0))
        names.insert(name);
  std::vector<std::string> metrics(names.begin(), names.end());
  if (metrics.size() > 4) metrics.resize(4);
  if (metrics != metrics_) metrics_ = metrics, relayout = true;
  if (relayout) {
    QStringList headers{"show", "run", "status", "step"};
    for (const auto& m : metrics_) headers << QString::fromStdString(m);
    for (const auto& k : keys_) headers << QString::fromStdString(k);
    table_->setColumnCount(static_cast<int>(headers.size()));
    table_->setHorizontalHeaderLabels(headers);
    table_->setRowCount(static_cast<int>(runs.size()));
  }
  auto set = [&](int row, int col, const QString& text) {
    QTableWidgetItem* item = table_->item(row, col);
    if (!item) table_->setItem(row, col, item = new QTableWidgetItem);
    if (item->text() != text) item->setText(text);
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const int row = static_cast<int>(i);
    const MonitoredRun& r = runs[i];
    QTableWidgetItem* show = table_->item(row, 0);
    if (!show) {
      show = new QTableWidgetItem;
      show->setFlags(Qt::ItemIsUserCheckable | Qt::ItemIsEnabled | Qt::ItemIsSelectable);
      show->setBackground(QColor::fromRgb(client::series_color(i)));  // the run's colour in every chart
      table_->setItem(row, 0, show);
    }
    const Qt::CheckState want = r.visible ? Qt::Checked : Qt::Unchecked;
    if (show->checkState() != want) show->setCheckState(want);
    set(row, 1, QString::fromStdString(r.name));
    set(row, 2, client::to_string(r.state.status()));
    set(row, 3, QString::number(r.state.latest_step()));
    int col = 4;
    for (const auto& m : metrics_) {
      const auto it = r.state.series().find(m);
      set(row, col++, it != r.state.series().end() && it->second.size() ? QString::number(it->second.values.back(), 'g', 4)
                                                                        : QString());
    }
    for (const auto& k : keys_) set(row, col++, QString::fromStdString(values_[k][i]));
  }
  if (relayout) table_->resizeColumnsToContents();
}

}  // namespace gantry::monitor
