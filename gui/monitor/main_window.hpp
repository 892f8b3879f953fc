// The monitor's window: owns the runs it watches (a stream source and a
// RunState each: one run, or several overlaid), drains the sources and
// redraws the views at most 20 times a second. It only wires the
// views (one class each) together: Scalars in the middle, Images, Run, Ranks,
// Events (and Runs, with several) in docks; the alert banner on top; the connection in the status bar.
#pragma once

#include <QMainWindow>
#include <QTimer>
#include <memory>

#include "events_view.hpp"
#include "images_view.hpp"
#include "ranks_view.hpp"
#include "run_state.hpp"
#include "run_view.hpp"
#include "runs_view.hpp"
#include "scalars_view.hpp"
#include "source.hpp"

class QDockWidget;
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
  /// Watches the runs a command line names (client::parse_targets): one,
  /// or several overlaid.
  void open(const std::vector<client::NamedTarget>& runs, const QString& remember);
  /// Every watched run finished, failed or stopped.
  bool all_ended() const;
  /// Drains the source into the state and redraws what changed (the timer calls it).
  void tick();

  /// The selected run's (the only one's, with one).
  const client::RunState& state() const { return runs_.empty() ? empty_ : runs_[selected_].state; }
  client::Source* source() const { return runs_.empty() ? nullptr : runs_[selected_].source.get(); }
  std::vector<MonitoredRun>& watched() { return runs_; }
  RunsView* runs() const { return runs_view_; }
  const client::SearchFollower& search() const { return search_; }
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
  void show_banner(const client::RunState& state);
  QStringList recent() const;

  void remember(const QString& text);
  void watch(std::vector<MonitoredRun> runs, const QString& title);

  std::vector<MonitoredRun> runs_;
  client::SearchFollower search_;  // the trials among runs_, and those a search starts while watched
  size_t selected_ = 0;
  uint64_t visibility_version_ = 0;  // bumped when a run is shown or hidden
  client::RunState empty_;
  RunsView* runs_view_;
  QDockWidget* runs_dock_;
  QDockWidget* ranks_dock_;
  bool ranks_sized_ = false;  // a run of many ranks: the Ranks dock raised and given room, once per watch
  QTimer timer_;
  ScalarsView* scalars_;
  ImagesView* images_;
  RunView* run_;
  RanksView* ranks_;
  EventsView* events_;
  QLabel* banner_;
  QLabel* connection_;
  QLabel* counters_;
  std::vector<wire::Message> inbox_;
};

}  // namespace gantry::monitor
