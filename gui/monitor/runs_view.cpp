#include "runs_view.hpp"

#include <QHeaderView>
#include <QSignalBlocker>
#include <QTableWidget>
#include <QVBoxLayout>

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

void RunsView::refresh(const std::vector<MonitoredRun>& runs, const client::SearchFollower* search) {
  const QSignalBlocker block(table_);
  std::vector<client::ChartRun> chart_runs;
  std::vector<std::string> configs;
  for (const auto& r : runs) {
    chart_runs.push_back({r.name, &r.state.series(), r.visible});
    configs.push_back(r.state.info() ? r.state.info()->config_yaml : "");
  }
  const std::vector<std::string> before_metrics = model_.table().metrics, before_keys = model_.table().keys;
  const client::RunsTable& t = model_.update(chart_runs, configs);
  const std::string score_title = search && search->any() ? "score (" + search->metric() + ")" : "";
  const bool relayout = static_cast<size_t>(table_->rowCount()) != runs.size() || t.metrics != before_metrics ||
                        t.keys != before_keys || score_title != score_title_;
  score_title_ = score_title;
  const int fixed = score_title.empty() ? 4 : 6;  // show, run, status, step [, rung, score]
  if (relayout) {
    QStringList headers{"show", "run", "status", "step"};
    if (!score_title.empty()) headers << "rung" << QString::fromStdString(score_title);
    for (const auto& m : t.metrics) headers << QString::fromStdString(m);
    for (const auto& k : t.keys) headers << QString::fromStdString(k);
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
    const std::optional<client::TrialRow> trial = search ? search->row(i) : std::nullopt;
    set(row, 2, trial ? QString::fromStdString(trial->status) : QString(client::to_string(r.state.status())));
    if (QTableWidgetItem* status = table_->item(row, 2);
        trial && status->toolTip() != QString::fromStdString(trial->note))
      status->setToolTip(QString::fromStdString(trial->note));
    set(row, 3, QString::number(r.state.latest_step()));
    if (fixed == 6) {
      set(row, 4, trial ? QString::fromStdString(trial->rung) : QString());
      set(row, 5, trial ? QString::fromStdString(trial->score) : QString());
    }
    int col = fixed;
    for (const auto& m : t.metrics) {
      const auto it = r.state.series().find(m);
      set(row, col++,
          it != r.state.series().end() && it->second.size() ? QString::number(it->second.values.back(), 'g', 4)
                                                            : QString());
    }
    for (const auto& k : t.keys) set(row, col++, QString::fromStdString(t.values.at(k)[i]));
  }
  if (relayout) table_->resizeColumnsToContents();
}

}  // namespace gantry::monitor
