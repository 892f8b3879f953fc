#include "main_window.hpp"

#include <algorithm>
#include <QAction>
#include <QApplication>
#include <QCloseEvent>
#include <QDateTime>
#include <QDockWidget>
#include <QFileDialog>
#include <QLabel>
#include <QMenuBar>
#include <QSettings>
#include <QStatusBar>
#include <QVBoxLayout>

#include "connect_dialog.hpp"
#include "liveness.hpp"

namespace gantry::monitor {

namespace {

QDockWidget* dock(QMainWindow* w, const QString& title, QWidget* view, Qt::DockWidgetArea area) {
  auto* d = new QDockWidget(title, w);
  d->setObjectName("dock_" + title);
  d->setWidget(view);
  w->addDockWidget(area, d);
  return d;
}

}  // namespace

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("gantry-monitor");
  scalars_ = new ScalarsView;
  images_ = new ImagesView;
  run_ = new RunView;
  ranks_ = new RanksView;
  events_ = new EventsView;
  runs_view_ = new RunsView;

  banner_ = new QLabel;
  banner_->setObjectName("alert_banner");
  banner_->setStyleSheet("background: #c62828; color: white; padding: 6px; font-weight: bold;");
  banner_->setWordWrap(true);
  banner_->hide();
  auto* center = new QWidget;
  auto* box = new QVBoxLayout(center);
  box->setContentsMargins(0, 0, 0, 0);
  box->addWidget(banner_);
  box->addWidget(scalars_, 1);
  setCentralWidget(center);

  QDockWidget* images = dock(this, "Images", images_, Qt::RightDockWidgetArea);
  QDockWidget* run = dock(this, "Run", run_, Qt::RightDockWidgetArea);
  QDockWidget* ranks = ranks_dock_ = dock(this, "Ranks", ranks_, Qt::BottomDockWidgetArea);
  QDockWidget* events = dock(this, "Events", events_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(images, run);
  images->raise();
  runs_dock_ = dock(this, "Runs", runs_view_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(ranks, events);
  tabifyDockWidget(ranks, runs_dock_);
  ranks->raise();
  runs_dock_->hide();  // shown when several runs are watched
  connect(runs_view_, &RunsView::visibility_changed, this, [this](int run, bool visible) {
    if (run < 0 || static_cast<size_t>(run) >= runs_.size()) return;
    runs_[static_cast<size_t>(run)].visible = visible;
    ++visibility_version_;
    scalars_->mark_dirty();
    tick();
  });
  connect(runs_view_, &RunsView::selected, this, [this](int run) {
    if (run < 0 || static_cast<size_t>(run) >= runs_.size() || static_cast<size_t>(run) == selected_) return;
    selected_ = static_cast<size_t>(run);
    banner_->hide();
    images_->forget();
    events_->forget();
    tick();
  });
  resizeDocks({images}, {520}, Qt::Horizontal);
  resizeDocks({ranks}, {170}, Qt::Vertical);

  connection_ = new QLabel("not connected");
  connection_->setObjectName("connection");
  counters_ = new QLabel;
  statusBar()->addWidget(connection_, 1);
  statusBar()->addPermanentWidget(counters_);

  QMenu* file = menuBar()->addMenu("&File");
  file->addAction("&Connect...", QKeySequence::Open, this, &MainWindow::show_connect_dialog);
  file->addAction("Open run &directory...", this, [this] {
    const QString dir = QFileDialog::getExistingDirectory(this, "Run directory");
    if (dir.isEmpty()) return;
    try {
      open(client::parse_targets({dir.toStdString()}), dir);  // an experiment or sweep: every run
    } catch (const std::invalid_argument& e) {
      connection_->setText(QString::fromStdString(e.what()));
    }
  });
  file->addSeparator();
  file->addAction("&Quit", QKeySequence::Quit, qApp, &QApplication::quit);
  QMenu* view = menuBar()->addMenu("&View");
  for (QDockWidget* d : {images, run, ranks, events}) view->addAction(d->toggleViewAction());

  QSettings settings;
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  if (settings.contains("scalars/smoothing")) scalars_->set_smoothing(settings.value("scalars/smoothing").toDouble());

  timer_.setInterval(50);  // at most 20 redraws a second
  connect(&timer_, &QTimer::timeout, this, &MainWindow::tick);
  timer_.start();
}

MainWindow::~MainWindow() = default;

QStringList MainWindow::recent() const { return QSettings().value("recent").toStringList(); }

void MainWindow::open(const client::Target& target, const QString& remember) {
  open({{target.describe(), target}}, remember);
}

void MainWindow::open(const std::vector<client::NamedTarget>& named, const QString& remember) {
  std::vector<MonitoredRun> runs;
  std::vector<std::string> dirs, names;
  for (const auto& n : named) {
    dirs.push_back(n.target.is_dir ? n.target.dir : "");
    names.push_back(n.name);
    MonitoredRun r;
    r.name = n.name;
    r.source = client::open_source(n.target);
    runs.push_back(std::move(r));
  }
  search_.watch(dirs, names);
  watch(std::move(runs), named.size() == 1 ? QString::fromStdString(named[0].target.describe())
                                           : QString("%1 runs: %2").arg(named.size()).arg(remember));
  this->remember(remember);
}

void MainWindow::watch(std::vector<MonitoredRun> runs, const QString& title) {
  runs_.clear();  // joins the sources' threads
  runs_ = std::move(runs);
  selected_ = 0;
  banner_->hide();
  images_->forget();
  events_->forget();
  scalars_->reset();
  runs_dock_->setVisible(runs_.size() > 1);
  if (runs_.size() > 1) runs_dock_->raise();
  ranks_sized_ = false;
  setWindowTitle("gantry-monitor: " + title);
  tick();
}

void MainWindow::remember(const QString& text) {
  QStringList r = recent();
  r.removeAll(text);
  r.prepend(text);
  while (r.size() > 10) r.removeLast();
  QSettings().setValue("recent", r);
}

bool MainWindow::all_ended() const {
  for (const auto& r : runs_) {
    if (!client::has_ended(r.state.status())) return false;
  }
  return !runs_.empty();
}

void MainWindow::show_connect_dialog() {
  ConnectDialog d(recent(), this);
  if (d.exec() == QDialog::Accepted) open(d.target(), d.text());
}

// The newest alert (NaN, failure) in red; else a lost run, in amber: its
// writer is gone without an end record (client::check_lost).
void MainWindow::show_banner(const client::RunState& state) {
  QString text;
  const wire::Event* e = state.current_alert();
  if (e)
    text = e->kind == "nan" ? QString("NaN or Inf in %1 at step %2").arg(QString::fromStdString(e->text)).arg(e->step)
                            : QString("Run failed at step %1: %2").arg(e->step).arg(QString::fromStdString(e->text));
  else if (state.status() == client::RunStatus::kLost)
    text = "Run " + QString::fromStdString(state.lost_text());
  if (text.isEmpty()) {
    if (!banner_->isHidden()) banner_->hide();
    return;
  }
  if (banner_->text() == text && !banner_->isHidden()) return;
  banner_->setStyleSheet(
      QString("background: %1; color: white; padding: 6px; font-weight: bold;").arg(e ? "#c62828" : "#b26a00"));
  banner_->setText(text);
  banner_->show();
}

void MainWindow::tick() {
  if (runs_.empty()) return;
  // A search watched while it runs: the trials it starts join the runs.
  const size_t before = runs_.size();
  for (const client::RunDir& d : search_.poll(QDateTime::currentMSecsSinceEpoch() / 1000.0)) {
    MonitoredRun r;
    r.name = d.name;
    client::Target t;
    t.is_dir = true;
    t.dir = d.dir;
    r.source = client::open_source(t);
    runs_.push_back(std::move(r));
  }
  if (before == 1 && runs_.size() > 1) {  // one run became several: the Runs dock, as open() shows it
    runs_dock_->setVisible(true);
    runs_dock_->raise();
  }
  uint64_t version = visibility_version_;
  std::vector<client::ChartRun> chart_runs;
  for (auto& r : runs_) {
    inbox_.clear();
    r.source->drain(inbox_);
    for (const auto& m : inbox_) r.state.apply(m);
    client::check_lost(r.state, *r.source, QDateTime::currentMSecsSinceEpoch() / 1000.0);
    version += r.state.version();
    chart_runs.push_back({r.name, &r.state.series(), r.visible, r.state.info() ? r.state.info()->start_time : 0});
  }
  const client::RunState& state = runs_[selected_].state;
  const client::SourceStatus st = runs_[selected_].source->status();
  QString conn = QString("%1: %2").arg(client::to_string(st.state), QString::fromStdString(st.text));
  if (runs_.size() > 1)
    conn = QString::fromStdString(runs_[selected_].name) + " (" + QString::number(selected_ + 1) + " of " +
           QString::number(runs_.size()) + "): " + conn;
  if (connection_->text() != conn) connection_->setText(conn);
  counters_->setText(QString("seq %1   step %2   %3")
                         .arg(state.last_seq())
                         .arg(state.latest_step())
                         .arg(client::to_string(state.status())));
  show_banner(state);
  if (runs_.size() > 1)
    scalars_->refresh(chart_runs, version);
  else
    scalars_->refresh(state);
  images_->refresh(state);
  run_->refresh(state);
  if (!ranks_sized_ && runs_.size() == 1 && state.info() && state.info()->world_size > 8) {
    // Many ranks: who holds the job back is the question; show the strip.
    ranks_sized_ = true;
    ranks_dock_->raise();
    resizeDocks({ranks_dock_}, {std::max(260, height() * 2 / 5)}, Qt::Vertical);
  }
  ranks_->refresh(state, QDateTime::currentMSecsSinceEpoch() / 1000.0);
  events_->refresh(state);
  if (runs_.size() > 1) runs_view_->refresh(runs_, &search_);
}

QString MainWindow::banner_text() const { return banner_->isHidden() ? QString() : banner_->text(); }
QString MainWindow::connection_text() const { return connection_->text(); }

void MainWindow::closeEvent(QCloseEvent* e) {
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  settings.setValue("scalars/smoothing", scalars_->options().smoothing);
  QMainWindow::closeEvent(e);
}

}  // namespace gantry::monitor
