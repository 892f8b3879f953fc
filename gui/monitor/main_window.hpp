// The monitor's window: owns the stream source and the RunState, drains the
// source and redraws the views at most 20 times a second. It only wires the
// views (one class each) together: Scalars in the middle, Images, Run, Ranks
// and Events in docks; the alert banner on top; the connection in the status bar.
#pragma once

#include <QMainWindow>
#include <QTimer>
#include <memory>

#include "events_view.hpp"
#include "images_view.hpp"
#include "ranks_view.hpp"
#include "run_state.hpp"
#include "run_view.hpp"
#include "scalars_view.hpp"
#include "source.hpp"

class QLabel;

namespace gantry::monitor {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
  ~MainWindow() override;

  /// Watches `target` from now on (a new RunState); `remember` is the text
  /// kept in the recent list.
  void open(const client::Target& target, const QString& remember);
  /// Drains the source into the state and redraws what changed (the timer calls it).
  void tick();

  const client::RunState& state() const { return state_; }
  client::Source* source() const { return source_.get(); }
  ScalarsView* scalars() const { return scalars_; }
  ImagesView* images() const { return images_; }
  RunView* run() const { return run_; }
  RanksView* ranks() const { return ranks_; }
  EventsView* events() const { return events_; }
  QString banner_text() const;
  QString connection_text() const;

 public slots:
  void show_connect_dialog();

 protected:
  void closeEvent(QCloseEvent* e) override;

 private:
  QStringList recent() const;

  std::unique_ptr<client::Source> source_;
  client::RunState state_;
  QTimer timer_;
  ScalarsView* scalars_;
  ImagesView* images_;
  RunView* run_;
  RanksView* ranks_;
  EventsView* events_;
  QLabel* banner_;
  QLabel* connection_;
  QLabel* counters_;
  size_t alerts_shown_ = 0;
  std::vector<wire::Message> inbox_;
};

}  // namespace gantry::monitor
