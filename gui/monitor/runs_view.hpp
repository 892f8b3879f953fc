// The Runs view, when the window watches several runs (an experiment, a
// sweep, run directories): one row a run with its colour and a checkbox that
// shows or hides its lines in every chart, its status and step, the final
// values of its metrics and the config keys that differ between the runs
// (TensorBoard's HParams table, kept simple). A search's trials show its
// view of them: status (running, promoted, paused, stopped, done, failed),
// rung and score (client/search.hpp). Selecting a row picks the run whose
// grid, config, ranks and events the other views show.
#pragma once

#include <QWidget>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "chart.hpp"
#include "run_state.hpp"
#include "search.hpp"
#include "source.hpp"

class QTableWidget;

namespace gantry::monitor {

/// One run the window watches.
struct MonitoredRun {
  std::string name;
  std::unique_ptr<client::Source> source;
  client::RunState state;
  bool visible = true;
};

class RunsView : public QWidget {
  Q_OBJECT
 public:
  explicit RunsView(QWidget* parent = nullptr);
  /// `search`: the trials among `runs` (nullptr: none).
  void refresh(const std::vector<MonitoredRun>& runs, const client::SearchFollower* search = nullptr);
  QTableWidget* table() const { return table_; }
  /// The config keys shown as columns (those that differ).
  const std::vector<std::string>& differing_keys() const { return model_.table().keys; }

 signals:
  void visibility_changed(int run, bool visible);
  void selected(int run);

 private:
  QTableWidget* table_;
  client::RunsTableModel model_;  // the metric and config-key columns
  std::string score_title_;       // "" when no run is a trial; else the rung and score columns' second title
};

}  // namespace gantry::monitor
