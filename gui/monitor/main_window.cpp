#include "main_window.hpp"

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
  QDockWidget* ranks = dock(this, "Ranks", ranks_, Qt::BottomDockWidgetArea);
  QDockWidget* events = dock(this, "Events", events_, Qt::BottomDockWidgetArea);
  tabifyDockWidget(images, run);
  images->raise();
  tabifyDockWidget(ranks, events);
  ranks->raise();
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
      open(client::parse_target(dir.toStdString()), dir);
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
  source_.reset();  // joins its thread
  state_ = client::RunState();
  alerts_shown_ = 0;
  banner_->hide();
  source_ = client::open_source(target);
  setWindowTitle("gantry-monitor: " + QString::fromStdString(target.describe()));
  QStringList r = recent();
  r.removeAll(remember);
  r.prepend(remember);
  while (r.size() > 10) r.removeLast();
  QSettings().setValue("recent", r);
  tick();
}

void MainWindow::show_connect_dialog() {
  ConnectDialog d(recent(), this);
  if (d.exec() == QDialog::Accepted) open(d.target(), d.text());
}

void MainWindow::tick() {
  if (!source_) return;
  inbox_.clear();
  source_->drain(inbox_);
  for (const auto& m : inbox_) state_.apply(m);
  const client::SourceStatus st = source_->status();
  const QString conn = QString("%1: %2").arg(client::to_string(st.state), QString::fromStdString(st.text));
  if (connection_->text() != conn) connection_->setText(conn);
  counters_->setText(QString("seq %1   step %2   %3")
                         .arg(state_.last_seq())
                         .arg(state_.latest_step())
                         .arg(client::to_string(state_.status())));
  if (state_.alerts().size() != alerts_shown_) {
    alerts_shown_ = state_.alerts().size();
    const wire::Event& e = state_.alerts().back();
    banner_->setText(e.kind == "nan" ? QString("NaN or Inf in %1 at step %2").arg(QString::fromStdString(e.text)).arg(e.step)
                                     : QString("Run failed at step %1: %2").arg(e.step).arg(QString::fromStdString(e.text)));
    banner_->show();
  }
  scalars_->refresh(state_);
  images_->refresh(state_);
  run_->refresh(state_);
  ranks_->refresh(state_, QDateTime::currentMSecsSinceEpoch() / 1000.0);
  events_->refresh(state_);
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
