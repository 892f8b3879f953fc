// The Ranks view: one row per rank (host, step, samples/s, memory, last
// seen); a rank that stopped reporting while the run is live is highlighted.
#pragma once

#include <QWidget>

#include "run_state.hpp"

class QTableWidget;

namespace gantry::monitor {

class RanksView : public QWidget {
  Q_OBJECT
 public:
  explicit RanksView(QWidget* parent = nullptr);
  /// `now`: Unix seconds (the wall clock; a test passes its own).
  void refresh(const client::RunState& state, double now);
  QTableWidget* table() const { return table_; }
  /// Ranks highlighted as stale on the last refresh.
  const std::vector<uint32_t>& stale() const { return stale_; }

 private:
  QTableWidget* table_;
  std::vector<uint32_t> stale_;
};

}  // namespace gantry::monitor
