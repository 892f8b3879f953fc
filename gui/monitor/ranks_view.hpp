// The Ranks view: the job at a glance, then the detail. On top, a line for
// the job (ranks, nodes, step time, busy median and max, stragglers, stale)
// and a strip of one cell per rank grouped by node: the cell's colour is the
// rank's busy time per step against the job's median (green: typical, red:
// twice it or more: the rank that holds the others back), a bar under it its
// step's parts (data, compute, comm, optimizer, other), a red frame a
// straggler, grey a rank that stopped reporting; hover for its numbers.
// Below, the table: a summary row per node (several nodes) and a row per
// rank, by rank or the slowest first.
#pragma once

#include <QWidget>

#include "ranks_model.hpp"
#include "run_state.hpp"

class QCheckBox;
class QLabel;
class QTableWidget;

namespace gantry::monitor {

/// The strip: nodes flow left to right, top to bottom, each its name and its
/// ranks' cells.
class RankStrip : public QWidget {
  Q_OBJECT
 public:
  explicit RankStrip(QWidget* parent = nullptr);
  void set(client::RanksSummary summary);
  const client::RanksSummary& summary() const { return summary_; }
  /// The rank whose cell holds `p` (-1: none).
  int rank_at(const QPoint& p) const;
  /// The cell of `rank` (empty when it has none).
  QRect cell_of(uint32_t rank) const;
  bool hasHeightForWidth() const override { return true; }
  int heightForWidth(int width) const override;
  QSize sizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;
  bool event(QEvent* e) override;
  void resizeEvent(QResizeEvent*) override;

 private:
  struct Placed {
    QRect label;
    std::vector<std::pair<QRect, uint32_t>> cells;  // (cell, rank)
  };
  std::vector<Placed> layout(int width) const;
  client::RanksSummary summary_;
  std::vector<Placed> placed_;
};

class RanksView : public QWidget {
  Q_OBJECT
 public:
  explicit RanksView(QWidget* parent = nullptr);
  /// `now`: Unix seconds (the wall clock; a test passes its own). Does
  /// nothing when neither the state, the second of `now` nor the order
  /// changed since the last call (the window calls it 20 times a second).
  void refresh(const client::RunState& state, double now);
  /// Refreshes done and skipped (nothing changed), and the last one's time.
  int refreshes() const { return refreshes_; }
  int skipped() const { return skipped_; }
  double last_refresh_ms() const { return last_ms_; }
  QTableWidget* table() const { return table_; }
  RankStrip* strip() const { return strip_; }
  QLabel* headline() const { return headline_; }
  QCheckBox* slowest_first() const { return slowest_; }
  /// Ranks highlighted as stale on the last refresh.
  const std::vector<uint32_t>& stale() const { return stale_; }
  /// The table's row of `rank` (-1: none).
  int row_of(uint32_t rank) const;

  enum Column {
    kRank,
    kHost,
    kStep,
    kSamples,
    kStepMs,
    kBusyMs,
    kData,
    kCompute,
    kComm,
    kOptimizer,
    kOther,
    kCpu,
    kRss,
    kGpu,
    kLastSeen,
    kColumns
  };

 private:
  QLabel* headline_;
  RankStrip* strip_;
  QCheckBox* slowest_;
  QTableWidget* table_;
  std::vector<uint32_t> stale_;
  std::vector<int64_t> row_rank_;                 // the rank of each table row (-1: a node's row)
  const client::RunState* last_state_ = nullptr;  // compared only, never read
  uint64_t last_version_ = 0;
  int64_t last_second_ = -1;
  bool last_slowest_ = false, dirty_ = true;
  int refreshes_ = 0, skipped_ = 0;
  double last_ms_ = 0;
};

}  // namespace gantry::monitor
