// The Events view: checkpoints, resumes, requeues, warnings, the end, newest last.
#pragma once

#include <QWidget>

#include "run_state.hpp"

class QTableWidget;

namespace gantry::monitor {

class EventsView : public QWidget {
  Q_OBJECT
 public:
  explicit EventsView(QWidget* parent = nullptr);
  void refresh(const client::RunState& state);
  /// Another run is shown from now on: the next refresh lists its events afresh.
  void forget();
  QTableWidget* table() const { return table_; }

 private:
  QTableWidget* table_;
};

}  // namespace gantry::monitor
