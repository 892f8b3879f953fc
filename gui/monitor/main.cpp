// gantry-monitor: watch a run live (HOST:PORT --token T, or the line the
// runner printed) or from its directory (follows the log while it grows).
//   gantry-monitor 127.0.0.1:5555 --token 3f2a...
//   gantry-monitor runs/gan_fashion_mnist/latest
//   gantry-monitor runs/gan_fashion_mnist        (every run of the experiment overlaid; a sweep directory too)
//   gantry-monitor RUN_DIR RUN_DIR ...           (these runs overlaid)
//   gantry-monitor RUN_DIR --screenshot shot.png   (grab the window once the run has ended, then exit)
#include <QApplication>
#include <QCommandLineParser>
#include <QElapsedTimer>
#include <QSettings>
#include <QTimer>
#include <cstdio>
#include <cstdlib>

#include "main_window.hpp"

int main(int argc, char** argv) {
  QElapsedTimer since_start;
  since_start.start();
  // Without a display Qt aborts with a page of text: say it in one line instead.
  if (!std::getenv("DISPLAY") && !std::getenv("WAYLAND_DISPLAY") && !std::getenv("QT_QPA_PLATFORM")) {
    std::fprintf(stderr,
                 "gantry-monitor: no display (DISPLAY is not set): use ssh -X, or QT_QPA_PLATFORM=offscreen "
                 "with --screenshot FILE\n");
    return 1;
  }
  QApplication app(argc, argv);
  QApplication::setOrganizationName("gantry");
  QApplication::setApplicationName("gantry-monitor");
  QCommandLineParser cli;
  cli.setApplicationDescription("Watch a gantry run: loss curves, image grids, ranks and events.");
  cli.addHelpOption();
  cli.addPositionalArgument("target", "HOST:PORT, the runner's 'monitor:' line, or a run directory");
  cli.addOption({"token", "the run's token (printed by the runner, and in RUN_DIR/monitor.txt)", "T"});
  cli.addOption({"screenshot", "save the window as PNG once the run has ended, then exit", "FILE"});
  cli.addOption({"timeout", "with --screenshot: give up after S seconds (exit 1)", "S", "120"});
  cli.addOption({"size", "window size WxH", "WxH"});
  cli.addOption({"verbose", "print start-up timings"});
  cli.process(app);

  gantry::monitor::MainWindow window;
  if (cli.isSet("size")) {
    const QStringList wh = cli.value("size").split('x');
    if (wh.size() == 2) window.resize(wh[0].toInt(), wh[1].toInt());
  } else if (!QSettings().contains("window/geometry")) {  // first start: a useful size (later: the last one)
    window.resize(1400, 900);
  }
  const QString text = cli.positionalArguments().join(' ');
  if (!text.isEmpty()) {
    try {
      // Every run named: directories (an experiment, a sweep, several runs)
      // and live targets; several are overlaid.
      std::vector<std::string> words;
      for (const QString& a : cli.positionalArguments()) words.push_back(a.toStdString());
      const auto named = gantry::client::parse_targets(words, cli.value("token").toStdString());
      window.open(named, text + (cli.isSet("token") ? " --token " + cli.value("token") : QString()));
    } catch (const std::invalid_argument& e) {
      std::fprintf(stderr, "gantry-monitor: %s\n", e.what());
      return 2;
    }
  }
  window.show();
  if (cli.isSet("verbose"))  // the first event-loop turn after show(): the window has been painted
    QTimer::singleShot(0, &window, [&since_start] {
      std::fprintf(stderr, "gantry-monitor: first frame after %lld ms\n",
                   static_cast<long long>(since_start.elapsed()));
    });
  if (text.isEmpty()) QTimer::singleShot(0, &window, &gantry::monitor::MainWindow::show_connect_dialog);

  if (cli.isSet("screenshot")) {
    const QString path = cli.value("screenshot");
    const double timeout_s = cli.value("timeout").toDouble();
    auto* poll = new QTimer(&window);
    auto* since = new QElapsedTimer;
    since->start();
    QObject::connect(poll, &QTimer::timeout, &window, [&window, path, timeout_s, since, poll] {
      const bool ended = window.all_ended();
      const bool late = since->elapsed() > timeout_s * 1000;
      if (!ended && !late) return;
      poll->stop();
      // One more redraw cycle so every view shows the end, then grab.
      QTimer::singleShot(400, &window, [&window, path, late] {
        window.tick();
        const bool saved = window.grab().save(path, "PNG");
        if (!saved) std::fprintf(stderr, "gantry-monitor: cannot write %s\n", qPrintable(path));
        if (late)
          std::fprintf(stderr, "gantry-monitor: the run had not ended (%s); screenshot taken anyway\n",
                       qPrintable(window.connection_text()));
        QApplication::exit(saved && !late ? 0 : 1);
      });
    });
    poll->start(100);
  }
  return app.exec();
}
